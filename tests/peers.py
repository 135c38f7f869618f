"""Go-built peer programs that more than one test module (or tests.build_peers) uses."""

from __future__ import annotations

import os
import shutil
import subprocess

from tests.support.requirements import REPO, require, require_go

HELM_VERSION = "v3.19.0"


def build_helm() -> str:
    """The helm binary: `.cache/bin/helm` built from its Go module (pinned), or one on PATH."""
    cached = REPO / ".cache" / "bin" / "helm"
    if cached.exists():
        return str(cached)
    found = shutil.which("helm")
    if found:
        return found
    go = require_go()
    env = dict(os.environ, GOBIN=str(cached.parent), CGO_ENABLED="0")
    out = subprocess.run(
        [go, "install", f"helm.sh/helm/v3/cmd/helm@{HELM_VERSION}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    require(out.returncode == 0, f"building helm {HELM_VERSION} failed: {out.stderr[-2000:]}")
    return str(cached)
