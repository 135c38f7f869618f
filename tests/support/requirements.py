"""What a test needs of the machine, and where the project and ../shared/ are.

`require(condition, reason)` skips a test whose prerequisite (Go, ../shared/, root, runc,
...) is missing. When NRI_RESMGR_STRICT=1 (set by .ci/run) the same call fails the test
instead, because CI is expected to have every prerequisite.  `require_go` and
`require_topologies` are the prerequisites several files share; `go_module_cache` is
where Go keeps downloaded module sources (the peers' builds fill it), as `go` itself says.

`require_two_cpus` is different: the end-to-end scenarios are sized for a machine whose
online CPUs are exactly 0-1, and on another machine they would be different tests, not
ones missing a prerequisite; so it skips, in strict mode too.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from nri_resmgr.topology.cpuset import IDSet

REPO = Path(__file__).resolve().parent.parent.parent
SHARED = Path(os.environ.get("NRI_RESMGR_SHARED", REPO.parent / "shared"))
TOPOLOGIES = SHARED / "topologies"
STRICT = os.environ.get("NRI_RESMGR_STRICT", "") not in ("", "0", "false", "no")


def require(condition: object, reason: str) -> None:
    """Skip (or, in strict mode, fail) the calling test unless `condition` holds."""
    if condition:
        return
    if STRICT:
        pytest.fail(f"prerequisite missing in strict mode (NRI_RESMGR_STRICT=1): {reason}")
    pytest.skip(reason)


def require_sysfs() -> None:
    """The machine's sysfs, which a daemon launched without --sysfs-root discovers."""
    require(
        Path("/sys/devices/system/cpu").is_dir(),
        "no sysfs: the launcher's path discovers the topology from /sys",
    )


def go_binary() -> str | None:
    """Path of the `go` tool, or None."""
    found = shutil.which("go")
    if found:
        return found
    fallback = Path("/usr/local/go/bin/go")
    return str(fallback) if fallback.exists() else None


def go_module_cache() -> Path:
    """Go's module cache: what ``go env GOMODCACHE`` says (it knows ``$GOMODCACHE``,
    ``$GOPATH``, its own env file and the default), or without Go the same default by
    hand (``$GOMODCACHE``, else the first of ``$GOPATH``'s ``/pkg/mod``, else
    ``~/go/pkg/mod``). A ``$HOME`` that is not the one the cache was filled under does
    not hide it from a test that asks go."""
    go = go_binary()
    if go is not None:
        out = subprocess.run(
            [go, "env", "GOMODCACHE"], capture_output=True, text=True, timeout=60, check=False
        )
        if out.returncode == 0 and out.stdout.strip():
            return Path(out.stdout.strip())
    if os.environ.get("GOMODCACHE"):
        return Path(os.environ["GOMODCACHE"])
    gopath = (os.environ.get("GOPATH") or "").split(os.pathsep)[0]
    return (Path(gopath) if gopath else Path.home() / "go") / "pkg" / "mod"


def require_go() -> str:
    go = go_binary()
    require(go, "the Go toolchain is not installed (needed to build the real NRI runtime library)")
    assert go is not None
    return go


def require_topologies() -> Path:
    require(
        TOPOLOGIES.is_dir(),
        f"{TOPOLOGIES} is absent (the real machine snapshots live in ../shared)",
    )
    return TOPOLOGIES


def online_cpus() -> frozenset[int]:
    """The CPUs this machine has online (the kernel's list)."""
    return frozenset(IDSet.parse(Path("/sys/devices/system/cpu/online").read_text()))


def require_two_cpus() -> None:
    """Skip (strict mode too: module docstring) unless the online CPUs are exactly 0-1."""
    online = online_cpus()
    if online != {0, 1}:
        pytest.skip(f"the scenarios are sized for CPUs 0-1; this machine has {IDSet(online)}")
