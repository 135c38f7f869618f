"""Building the Go fake runtime, one program per NRI release (`VERSIONS`).

`tests/conformance/harness/<version>/` is a Go module that builds `nri-fake-runtime`
against `github.com/containerd/nri` of that release (`tests.conformance.harness` drives
it).  `build_harness(version)` compiles a version once and caches the binary under
`.cache/conformance/<version>/<hash>/`, keyed by a hash of the Go sources, go.mod and
go.sum, so repeated test runs and benchmarks reuse it; `CONTAINERD_FOR` names a
containerd release that ships each NRI release (sent as the runtime's version).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
from pathlib import Path

from tests.support.requirements import REPO, require_go


class HarnessError(Exception):
    """The harness itself misbehaved: it died, timed out or sent garbage."""


HARNESS_SRC = Path(__file__).resolve().parent / "harness"


CACHE = REPO / ".cache" / "conformance"


BINARY_NAME = "nri-fake-runtime"


# NRI release -> the containerd releases that vendor it (NRI-FACTS §0).
VERSIONS: dict[str, str] = {
    "v0.3.0": "containerd 1.7.0-1.7.6",
    "v0.6.1": "containerd 1.7.16-1.7.25",
    "v0.8.0": "containerd 1.7.26+, 2.0, 2.1",
    "v0.11.0": "containerd 2.2.1-2.2.x",
    "v0.12.2": "containerd 2.3+",
}


# A containerd version that ships each NRI release; sent as runtime_version.
CONTAINERD_FOR: dict[str, str] = {
    "v0.3.0": "1.7.5",
    "v0.6.1": "1.7.20",
    "v0.8.0": "2.1.4",
    "v0.11.0": "2.2.3",
    "v0.12.2": "2.3.1",
}


def version_key(version: str) -> tuple[int, ...]:
    """("v0.11.0") -> (0, 11, 0), for comparisons like `version_key(v) >= (0, 10)`."""
    return tuple(int(part) for part in version.lstrip("v").split("."))


def _source_digest(version: str) -> str:
    vdir = HARNESS_SRC / version
    if not (vdir / "go.mod").is_file():
        raise ValueError(
            f"NRI version {version!r}: no harness module {vdir}/go.mod; "
            f"expected one of {', '.join(VERSIONS)}"
        )
    h = hashlib.sha256()
    for path in sorted(vdir.iterdir()):
        if path.suffix == ".go" or path.name in ("go.mod", "go.sum"):
            h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def build_harness(version: str, *, go: str | None = None) -> Path:
    """Build (or reuse) the fake runtime for one NRI version; return the binary path.

    Skips the calling test if Go is missing (fails under NRI_RESMGR_STRICT=1).
    Concurrent builders of the same version wait for each other on a file lock.
    """
    digest = _source_digest(version)
    out_dir = CACHE / version / digest
    binary = out_dir / BINARY_NAME
    if binary.is_file():
        return binary
    go = go or require_go()
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if binary.is_file():
            return binary
        tmp = out_dir / f".{BINARY_NAME}.{os.getpid()}"
        proc = subprocess.run(
            [go, "build", "-buildvcs=false", "-o", str(tmp), "."],
            cwd=HARNESS_SRC / version,
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise HarnessError(
                f"building the NRI {version} fake runtime failed (go build exit "
                f"{proc.returncode}):\n{proc.stdout}{proc.stderr}"
            )
        tmp.rename(binary)
    return binary
