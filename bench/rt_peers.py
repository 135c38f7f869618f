"""The peers of `bench.containerd_rt` on a private containerd: how each is started and
timed from containerd's log.

`attached(peer)` runs a peer as an external plugin on the runtime's NRI socket for the
block (`go-noop`: the Go stub no-op; `nri-plugins`: their topology-aware with `NP_CONFIG`;
`nri-resmgr`: the daemon with `RESMGR_CONFIG`, both reserving CPU 0), each under its
index and name (`IDENTITY`); `preregistered_startup(peer)` restarts containerd with the
peer's launcher in its plugin dir and times "starting pre-installed NRI plugin" to
"synchronization success".  `LogCursor` reads containerd's log from where the last
look stopped, the times taken from the log lines themselves.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.common import build_go_noop, build_nri_plugins, spawn
from tests.e2e import containerd as ctdmod

DAEMON = Path(__file__).resolve().parent / "plugins" / "resmgr.py"


NP_CONFIG = """\
apiVersion: config.nri/v1alpha1
kind: TopologyAwarePolicy
metadata:
  name: default
spec:
  pinCPU: true
  pinMemory: true
  reservedResources:
    cpu: cpuset:0
"""


RESMGR_CONFIG = {
    "policy": "topology-aware",
    "policyConfig": {"reservedResources": {"cpu": "cpuset:0"}},
}


IDENTITY = {
    "go-noop": ("10", "gonoop"),
    "nri-plugins": ("90", "topology-aware"),
    "nri-resmgr": ("90", "resmgr"),
}


class LogCursor:
    """Reads containerd's log from where the last look stopped."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = path.stat().st_size if path.exists() else 0

    def wait_for(self, *needles: str, timeout: float) -> dict[str, float]:
        """Epoch time of the first new line containing each of `needles` (all required)."""
        found: dict[str, float] = {}
        deadline = time.monotonic() + timeout
        pending = ""
        while True:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
            self.offset += len(chunk)
            pending += chunk.decode(errors="replace")
            *lines, pending = pending.split("\n")
            for line in lines:
                for n in needles:
                    if n not in found and n in line:
                        t = ctdmod.log_time(line)
                        if t is not None:
                            found[n] = t
                if "failed to synchronize plugin" in line:
                    raise RuntimeError(f"containerd: {line.strip()}")
            if len(found) == len(needles):
                return found
            if time.monotonic() > deadline:
                missing = [n for n in needles if n not in found]
                raise RuntimeError(f"containerd never logged {missing}")
            time.sleep(0.02)


def _argv(peer: str, socket: Path | None, work: Path) -> list[str]:
    """How to start `peer`; external on `socket`, or pre-registered when it is None."""
    if peer == "go-noop":
        out = [str(build_go_noop())]
        if socket is not None:
            idx, name = IDENTITY[peer]
            out += ["-socket", str(socket), "-idx", idx, "-name", name]
        return out
    if peer == "nri-plugins":
        assert socket is not None
        cfg = work / "np.yaml"
        cfg.write_text(NP_CONFIG)
        state = work / "np-state"
        # its cache would carry allocations over from the peer's previous turn
        for entry in state.iterdir():
            if entry.is_file():
                entry.unlink()
        return [
            str(build_nri_plugins()),
            "--config-file",
            str(cfg),
            "--nri-socket",
            str(socket),
            "--nri-plugin-index",
            "90",
            "--nri-plugin-name",
            "topology-aware",
            "--state-dir",
            str(state),
            "--pid-file",
            str(work / "np.pid"),
        ]
    state = work / f"resmgr-state-{uuid.uuid4().hex[:8]}"  # a cold start every time
    cfg = work / "resmgr.json"
    cfg.write_text(
        json.dumps(
            {
                **RESMGR_CONFIG,
                "log": {"level": "info", "format": "json", "file": str(work / "resmgr.log")},
            }
        )
    )
    out = [
        sys.executable,
        str(DAEMON),
        "--config",
        str(cfg),
        "--sysfs-root",
        "/",
        "--state-dir",
        str(state),
    ]
    if socket is not None:
        idx, name = IDENTITY[peer]
        out += ["--socket", str(socket), "--idx", idx, "--name", name]
    return out


def prepare_nri_plugins_state(work: Path) -> None:
    # It bind-mounts files from its state dir into every container ("rslave"), which
    # containerd allows only from a shared mount (on a node: the hostPath's mount).
    state = work / "np-state"
    state.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "--bind", str(state), str(state)], check=True)
    subprocess.run(["mount", "--make-rshared", str(state)], check=True)


@contextlib.contextmanager
def attached(peer: str, ctd: ctdmod.Containerd, work: Path) -> Iterator[dict[str, Any]]:
    """Connect `peer` to containerd; yield its timings and pid; stop it afterwards."""
    idx, name = IDENTITY[peer]
    cursor = LogCursor(ctd.layout.log)
    t0 = time.time()
    proc = spawn(_argv(peer, ctd.layout.nri_socket, work), log_path=work / f"{peer}.log", cwd=work)
    info: dict[str, Any] = {"pid": proc.pid}
    try:
        needles = (
            f'registered as \\"{idx}-{name}\\"',
            f"synchronizing plugin {idx}-{name}",
            f'plugin \\"{idx}-{name}\\" connected and synchronized',
        )
        try:
            seen = cursor.wait_for(*needles, timeout=600)
        except RuntimeError as e:  # containerd gave up on its Synchronize
            info["sync_error"] = str(e)
        else:
            info["registered_s"] = seen[needles[0]] - t0
            info["sync_s"] = seen[needles[2]] - seen[needles[1]]
        yield info
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.returncode not in (0, -15, None):
            print(f"bench: {peer} exited {proc.returncode}; see {work}/{peer}.log", file=sys.stderr)
        # containerd notices the closed connection asynchronously
        with contextlib.suppress(RuntimeError):
            cursor.wait_for(f'connection to plugin \\"{idx}-{name}\\" closed', timeout=10)


def preregistered_startup(peer: str, ctd: ctdmod.Containerd, work: Path) -> float:
    """Restart containerd with `peer` in its plugin dir; seconds from launch to sync."""
    idx, name = IDENTITY[peer]
    launcher = ctd.layout.plugin_path / f"{idx}-{name}"
    argv = " ".join(f"'{a}'" for a in _argv(peer, None, work))
    launcher.write_text(f"#!/bin/sh\nexec {argv} >>'{work}/{peer}-prereg.log' 2>&1\n")
    launcher.chmod(0o755)
    try:
        ctd.stop()
        cursor = LogCursor(ctd.layout.log)
        ctd.start()
        needles = (
            f'starting pre-installed NRI plugin \\"{name}\\"',
            f'NRI plugin \\"{idx}-{name}\\" synchronization success',
        )
        seen = cursor.wait_for(*needles, timeout=60)
        return seen[needles[1]] - seen[needles[0]]
    finally:
        launcher.unlink()
        ctd.stop()
        ctd.start()
        for proc in Path("/proc").iterdir():  # the launched plugin outlives the restart
            with contextlib.suppress(OSError):
                if proc.name.isdigit() and str(work).encode() in (proc / "cmdline").read_bytes():
                    os.kill(int(proc.name), 15)
