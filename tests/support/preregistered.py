"""A plugin process started the way a runtime starts a pre-registered plugin.

The runtime execs the plugin with the socket on fd 3, an environment of exactly
NRI_PLUGIN_NAME, NRI_PLUGIN_IDX and NRI_PLUGIN_SOCKET=3 (no PATH), and stdout/stderr
discarded (`launch_preregistered`); `wait_exit` waits for the process on the event loop.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
from collections.abc import Sequence

__all__ = ["launch_preregistered", "wait_exit"]


def launch_preregistered(
    argv: Sequence[str], plugin_end: socket.socket, *, name: str, idx: str
) -> subprocess.Popen[bytes]:
    """Start `argv` like a runtime starts a pre-registered plugin (socket on fd 3)."""
    fd = plugin_end.fileno()

    def socket_on_fd3() -> None:  # runs in the child between fork and exec
        if fd == 3:
            os.set_inheritable(3, True)
        else:
            os.dup2(fd, 3)

    env = {"NRI_PLUGIN_NAME": name, "NRI_PLUGIN_IDX": idx, "NRI_PLUGIN_SOCKET": "3"}
    try:
        return subprocess.Popen(
            list(argv),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=False,  # fd 3 is made inheritable in the child; others are CLOEXEC
            preexec_fn=socket_on_fd3,  # only a dup2 runs between fork and exec
        )
    finally:
        plugin_end.close()


async def wait_exit(proc: subprocess.Popen[bytes]) -> int:
    """The plugin process's exit status (30 s at most), without blocking the event loop."""
    return await asyncio.to_thread(proc.wait, 30)
