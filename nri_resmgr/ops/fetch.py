"""Reading one of the daemon's read-only JSON pages, for the command line.

`fetch_json(url, what=...)` GETs `url` and returns its JSON object; anything else (no
daemon, a timeout, more than `max_bytes`, not JSON, not an object) is a `ResmgrError`
naming the URL, what was expected and what was found.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from nri_resmgr.model import ResmgrError

__all__ = ["DEFAULT_URL", "MAX_PAGE_BYTES", "fetch_json"]

#: the daemon's HTTP endpoint (`nri-resmgr run --metrics-address`)
DEFAULT_URL = "http://127.0.0.1:8891"
#: the most a page may be (a node of 8192 CPUs and thousands of containers is a few MB)
MAX_PAGE_BYTES = 64 << 20


def fetch_json(
    url: str, *, what: str, max_bytes: int = MAX_PAGE_BYTES, timeout: float = 30
) -> dict[str, Any]:
    """The JSON object at `url` (`what` names it in errors)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            body = resp.read(max_bytes + 1)
    except (urllib.error.URLError, OSError) as exc:
        raise ResmgrError(f"{url}: expected {what}, found {exc}") from exc
    if len(body) > max_bytes:
        raise ResmgrError(f"{url}: expected at most {max_bytes} bytes of {what}, found more")
    try:
        doc = json.loads(body)
    except ValueError as exc:
        raise ResmgrError(f"{url}: expected {what} as JSON, found {exc}") from exc
    if not isinstance(doc, dict):
        raise ResmgrError(f"{url}: expected {what} as a JSON object, found {type(doc).__name__}")
    return doc
