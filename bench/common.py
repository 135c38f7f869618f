"""Helpers shared by the benchmarks: machine notes, peer binaries, processes, memory.

Build outputs go under `.cache/` (git-ignored): the external Go no-op plugin built from
`bench/go/noop` in `.cache/bench/`, and containers/nri-plugins' topology-aware plugin built
from its public Go module by `tests.peers.make_nri_plugins` in `.cache/nri-plugins/`.
"""

from __future__ import annotations

import atexit
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.peers import NRI_PLUGINS_VERSION, NriPluginsBuildError, make_nri_plugins

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
CACHE = REPO / ".cache" / "bench"
NOOP_SRC = BENCH / "go" / "noop"


def state_dir() -> str:
    """A fresh, writable state directory for an in-process pipeline, removed at exit.

    The benches measure what production does, placement records written: a missing
    directory takes the records' failure path (a warning and an unlink per write), and a
    directory shared by two benches lets them race on one file."""
    path = tempfile.mkdtemp(prefix="nri-resmgr-bench-state-")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def load_note() -> str:
    """The 1/5/15-minute load averages and the CPU count, for a result's notes."""
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


def machine() -> dict[str, Any]:
    """What a result was measured on."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    go = shutil.which("go")
    go_version = ""
    if go:
        go_version = subprocess.run(
            [go, "env", "GOVERSION"], capture_output=True, text=True, check=False
        ).stdout.strip()
    return {
        "cpu": model,
        "cpus": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "go": go_version,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load_before": load_note(),
    }


def _go() -> str:
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if not Path(go).exists():
        raise RuntimeError("bench: the Go toolchain is needed to build the Go peers; found no go")
    return go


def build_go_noop() -> Path:
    """Build (or reuse) the external Go stub no-op plugin; return its path."""
    out = CACHE / "nri-noop"
    sources = [NOOP_SRC / "main.go", NOOP_SRC / "go.mod", NOOP_SRC / "go.sum"]
    if out.exists() and all(out.stat().st_mtime >= p.stat().st_mtime for p in sources):
        return out
    CACHE.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [_go(), "build", "-buildvcs=false", "-o", str(out), "."], cwd=NOOP_SRC, check=True
    )
    return out


def build_nri_plugins() -> Path:
    """Build (or reuse) nri-plugins' topology-aware plugin (`tests.peers`, which the tests'
    differential run shares); return its path."""
    try:
        return make_nri_plugins().topology_aware
    except NriPluginsBuildError as exc:
        raise RuntimeError(f"bench: nri-plugins {NRI_PLUGINS_VERSION}: {exc}") from exc


def spawn(
    argv: Sequence[str],
    *,
    log_path: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start a plugin process with stdout and stderr appended to `log_path`."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("NRI_PLUGIN_")}
    full_env.update(env or {})
    with open(log_path, "ab") as out:
        return subprocess.Popen(
            list(argv),
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
        )


def python_plugin_argv(plugin: Path, *, socket: Path, idx: str, name: str) -> list[str]:
    """How the harness starts an external Python plugin."""
    return [sys.executable, str(plugin), "--socket", str(socket), "--idx", idx, "--name", name]


def rss_kib(pid: int) -> int:
    """Resident memory of a process (VmRSS from /proc/PID/status), KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"bench: /proc/{pid}/status has no VmRSS line")


def cpu_ns(pid: int) -> int:
    """CPU time of every live thread of a process so far (sum of /proc schedstat), ns."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return total


def settled_cpu_ns(pid: int, *, quiet_s: float = 0.5, limit_s: float = 30.0) -> int:
    """`cpu_ns` of a process once it has gone idle: read again every `quiet_s` until two
    reads agree (a daemon's writes after its reply run after the peer has its answer), at
    most `limit_s`; then the last read.  A tenth of a second was too short: a daemon at
    1,000 containers once read below one on an empty node (bench.scale, 2026-11-28)."""
    last = cpu_ns(pid)
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        time.sleep(quiet_s)
        now = cpu_ns(pid)
        if now == last:
            break
        last = now
    return last
