"""The Helm chart's reset on uninstall: is our DaemonSet going away, and is the daemon gone?

`nri-resmgr reset --on-uninstall NAMESPACE/DAEMONSET` runs as a second container in the
daemon's pod (the theory is in `nri_resmgr.commands.reset`).  This module holds its
waiting and asking: SIGTERM held pending until the kubelet sends it
(`block_termination`, `wait_for_termination`), the DaemonSet read through the API server
(`DaemonSetProbe`, whose reads `nri_resmgr.ops.reset.termination_verdict` judges), and
the daemon container's HTTP port watched until it closes (`wait_port_closed`; the pod
shares one network namespace).  The client is imported only when a probe is made.

The hand-off (`Handoff`, ``--handoff-dir``, an emptyDir both processes see): on containerd
the reset cannot run after the kubelet's SIGTERM, because the CRI StopContainer of its own
container holds NRI's plugin synchronization until that container has exited.  So the
chart runs the judging and the reset in the container's ``preStop`` hook
(``--prestop``), which the kubelet runs before it stops the container; the container's
main process only records the DaemonSet's UID at start-up (``started-uid``) for the hook,
and on SIGTERM finds the hook's report (``done``), prints it to the container's log and
exits.  Without a report (no hook, or it failed) it judges and resets itself, as before.
"""

from __future__ import annotations

import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

from nri_resmgr.ops.reset import ResetError, Verdict, termination_verdict

__all__ = [
    "TERMINATION",
    "DaemonSetProbe",
    "Handoff",
    "block_termination",
    "wait_for_termination",
    "wait_port_closed",
]


#: the signals that end the reset container's wait
TERMINATION = frozenset({signal.SIGTERM, signal.SIGINT})


def block_termination() -> None:
    """Hold SIGTERM/SIGINT pending from now on, for `wait_for_termination` to take.

    Call it before announcing the wait: a signal that came earlier would otherwise kill
    the process.  They stay blocked afterwards, so a second SIGTERM cannot cut the reset
    short (the kubelet's SIGKILL at the end of the grace period still ends everything).
    """
    signal.pthread_sigmask(signal.SIG_BLOCK, TERMINATION)


def wait_for_termination() -> int:
    """Block until SIGTERM or SIGINT arrives (after `block_termination`); its number."""
    return int(signal.sigwait(TERMINATION))


def wait_port_closed(endpoint: str, *, timeout: float) -> bool:
    """Poll until nothing accepts connections at ``HOST:PORT``; False on timeout."""
    host, sep, port = endpoint.rpartition(":")
    if not sep or not port.isdigit():
        raise ResetError(
            f"--wait-port: expected HOST:PORT such as 127.0.0.1:8891; found {endpoint!r}"
        )
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host or "127.0.0.1", int(port)), timeout=0.5):
                pass
        except OSError:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


class DaemonSetProbe:
    """Reads of one DaemonSet (``namespace/name``) through the API, for `termination_verdict`."""

    def __init__(self, ref: str, *, kubeconfig: str | None) -> None:
        import os

        from nri_resmgr.kube.client import KubeClient, in_cluster_credentials, load_kubeconfig

        namespace, sep, name = ref.partition("/")
        if not (sep and namespace and name) or "/" in name:
            raise ResetError(f"--on-uninstall: expected NAMESPACE/DAEMONSET; found {ref!r}")
        self.ref = ref
        self.path = f"/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}"
        config = kubeconfig or os.environ.get("KUBECONFIG")
        try:
            creds = load_kubeconfig(config) if config else in_cluster_credentials()
        except (OSError, ValueError, KeyError) as exc:
            raise ResetError(
                f"kubeconfig {config}: expected a readable kubeconfig; found {exc}"
            ) from exc
        if creds is None:
            raise ResetError(
                "--on-uninstall: expected in-cluster credentials or --kubeconfig; found neither"
            )
        self.client = KubeClient(creds, timeout=5.0)

    def read(self) -> tuple[int, dict[str, Any] | None, str]:
        """HTTP status (0: no answer), the object if 200, and the error text if not."""
        from nri_resmgr.kube.client import KubeError

        try:
            return 200, self.client.request("GET", self.path), ""
        except KubeError as exc:
            return exc.status, None, str(exc)

    def uid(self) -> str | None:
        """The DaemonSet's UID now, None if it cannot be read (the reason is printed)."""
        _, obj, error = self.read()
        if obj is None:
            print(
                f"reset: DaemonSet {self.ref}: expected to read it at start-up; found "
                f"{error}; an uninstall may not be recognised",
                file=sys.stderr,
                flush=True,
            )
            return None
        uid = (obj.get("metadata") or {}).get("uid")
        return str(uid) if uid else None

    def verdict(self, started_uid: str | None) -> tuple[Verdict, str]:
        """Reset, keep or unknown, and why, from a read now compared with `started_uid`."""
        status, obj, error = self.read()
        verdict, why = termination_verdict(started_uid=started_uid, status=status, daemonset=obj)
        return verdict, (f"{why} ({error})" if error and verdict is Verdict.UNKNOWN else why)


class Handoff:
    """The files by which the preStop hook and the container's main process meet."""

    STARTED_UID = "started-uid"
    DONE = "done"

    def __init__(self, directory: str) -> None:
        self.dir = Path(directory)

    def record_uid(self, uid: str | None) -> None:
        """The main process: the DaemonSet's UID at start-up ("" when unreadable)."""
        try:
            (self.dir / self.STARTED_UID).write_text(uid or "")
        except OSError as exc:
            raise ResetError(
                f"--handoff-dir {self.dir}: expected a writable directory; found {exc}"
            ) from exc

    def started_uid(self) -> str | None:
        """The hook: the UID the main process recorded (None if it recorded none)."""
        try:
            return (self.dir / self.STARTED_UID).read_text().strip() or None
        except OSError:
            print(
                f"reset: {self.dir / self.STARTED_UID}: expected the DaemonSet's UID from "
                "start-up; found none; a recreated DaemonSet may not be recognised",
                file=sys.stderr,
                flush=True,
            )
            return None

    def finish(self, report: str, status: int) -> None:
        """The hook: what it did and its exit status, for the main process to print."""
        try:
            (self.dir / self.DONE).write_text(f"{report.rstrip()}\nexit status {status}\n")
        except OSError as exc:
            print(f"reset: {self.dir / self.DONE}: {exc}", file=sys.stderr, flush=True)

    def report(self) -> str | None:
        """The main process: the hook's report, or None when the hook did not finish."""
        try:
            return (self.dir / self.DONE).read_text()
        except OSError:
            return None
