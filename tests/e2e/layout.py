"""Where a private runtime keeps everything, and clearing it after a run.

`Layout` is every path a private containerd (or CRI-O: tests/e2e/crio.py) uses, all
under one short temp dir, so that runs beside each other share nothing.  What a stopped
runtime leaves behind is cleared from the layout alone: `kill_shims` kills the shims
started for it (found by the layout's path on their command line), `task_ids` and
`remove_shim_sockets` remove the shims' sockets under `SHIM_SOCKET_DIR`, and
`unmount_under` unmounts whatever is still mounted below a directory, deepest first.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import signal
import subprocess
from pathlib import Path


@dataclasses.dataclass(frozen=True, slots=True)
class Layout:
    """Every path a private containerd uses, all under one short temp dir."""

    base: Path

    @property
    def root(self) -> Path:
        return self.base / "root"

    @property
    def state(self) -> Path:
        return self.base / "state"

    @property
    def grpc_socket(self) -> Path:
        return self.base / "ctd.sock"

    @property
    def nri_socket(self) -> Path:
        return self.base / "nri.sock"

    @property
    def plugin_path(self) -> Path:
        return self.base / "opt" / "nri" / "plugins"  # as `install --root base` writes

    @property
    def plugin_config_path(self) -> Path:
        return self.base / "etc" / "nri" / "conf.d"

    @property
    def config(self) -> Path:
        return self.base / "config.toml"

    @property
    def log(self) -> Path:
        return self.base / "containerd.log"

    @property
    def bin(self) -> Path:
        return self.base / "bin"

    @property
    def runc_wrapper(self) -> Path:
        """The runc (Debian's, or a built `RUNC`) behind a shell wrapper that can delay
        `runc create` (faults)."""
        return self.bin / "runc"

    @property
    def slow_runc_flag(self) -> Path:
        """While this file exists, `runc create` first sleeps as many seconds as it says."""
        return self.base / "slow-runc-create"

    @property
    def endpoint(self) -> str:
        return f"unix://{self.grpc_socket}"


def kill_shims(layout: Layout) -> None:
    """SIGKILL every process whose command line names this containerd's paths."""
    marker = str(layout.base).encode()
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker in cmdline and b"containerd-shim" in cmdline:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(entry.name), signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)


SHIM_SOCKET_DIR = Path("/run/containerd/s")  # fixed in containerd, whatever the state dir


def task_ids(layout: Layout) -> dict[str, set[str]]:
    """{namespace: task ids} from the runtime v2 bundle dirs (present while tasks exist)."""
    tasks = layout.state / "io.containerd.runtime.v2.task"
    if not tasks.is_dir():
        return {}
    return {ns.name: {p.name for p in ns.iterdir()} for ns in tasks.iterdir() if ns.is_dir()}


def remove_shim_sockets(layout: Layout, task_ids: dict[str, set[str]]) -> None:
    """Unlink the sockets our (killed) shims left in /run/containerd/s.

    containerd names them sha256(<grpc address>/<namespace>/<id>[/debug]); our grpc
    address is private, so these names cannot be anybody else's.
    """
    for ns, ids in task_ids.items():
        for task_id in ids:
            for suffix in ("", "/debug"):
                path = f"{layout.grpc_socket}/{ns}/{task_id}{suffix}"
                sock = SHIM_SOCKET_DIR / hashlib.sha256(path.encode()).hexdigest()
                with contextlib.suppress(OSError):
                    if sock.is_socket():
                        sock.unlink()


def unmount_under(base: Path) -> None:
    prefix = str(base.resolve())
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return
    points = [ln.split()[4] for ln in lines]
    for p in sorted((p for p in points if p.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "-l", p], capture_output=True)
