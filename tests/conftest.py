"""Suite-wide settings.

Hypothesis: under CI (CI=true, as the CI runner sets it) every property test runs a fixed,
derandomized set of examples and keeps no example database, so a CI run is reproducible
and its verdict is the commit's, not the draw's. Elsewhere the default profile draws new
examples on every run and remembers failures in .hypothesis/, which is where new bugs are
found (and then pinned with @example).
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
    settings.load_profile("ci")
