"""`nri-resmgr reset`: send every pinned container back to the full set; drop our RDT groups.

Theory of operation
-------------------
Run after the daemon is gone (uninstall: `nri-resmgr uninstall` runs it, the Helm chart
runs it when its DaemonSet is deleted; see docs/operations.md, "Uninstall").  It is a
short-lived NRI plugin of its own (default ``99-resmgr-reset``, a name and index distinct
from the daemon's, so it may connect while the daemon is still registered):

1. read the host's allowed sets: the online CPUs (``sys/devices/system/cpu/online``) and
   the memory nodes (``sys/devices/system/node/has_memory``, else ``node/online``, else
   node 0 on a kernel without NUMA) under ``--sysfs-root``;
2. connect to the runtime's NRI socket, register, and receive Synchronize (every pod and
   container), replying with no updates;
3. plan (`nri_resmgr.ops.reset.plan_reset`: every live container whose cpuset is narrower
   than the allowed set) and send the updates with UpdateContainers, whose reply names
   the updates the runtime could not apply;
4. disconnect, then remove the resctrl groups recorded in the daemon's ownership record
   (``<state-dir>/resctrl-groups.json``; nothing else is touched): pod and monitoring
   groups first, then class groups.  Removing a group moves its tasks to the root group;
5. put back the CPU class files (cpufreq, cpuidle, uncore) recorded in
   ``<state-dir>/cpuclass-originals.json`` under ``--sysfs-root``: a daemon that stopped
   cleanly has done so itself and left no record, one that crashed has not.

Steps 1, 4 and 5 are `nri_resmgr.control.host_reset`'s.  Steps 2-3 are bounded by
``--timeout`` (which also covers ``--wait-port`` below).  Exit status: 0 when every
planned update was applied and every owned group removed, 1 when the runtime could not
be reached or refused something (each failure is printed), 2 for a
bad command line or an unreadable sysfs.

While the daemon is still connected it would re-pin containers at its next event, so run
this after the daemon has stopped (`uninstall` stops a pre-registered instance first).

``--on-uninstall NAMESPACE/DAEMONSET`` is the Helm chart's mode (a second container in the
daemon's pod): when the pod is deleted (its ``preStop`` hook, ``--prestop``, else SIGTERM)
ask the API server whether that DaemonSet is gone or being deleted
(`nri_resmgr.ops.reset.termination_verdict`, against a read made at start-up and handed to
the hook through ``--handoff-dir``), and exit without touching anything if not (a rolling
update or a pod deletion: the next daemon takes the containers over); else wait until the
daemon container has exited (``--wait-port``: its HTTP port stops accepting connections,
as the pod shares one network namespace), then reset as above.  The waiting, asking and
hand-off live in `nri_resmgr.kube.uninstall`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import logging
import signal
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nri_api import api
from nri_api.errors import ConnectionClosed, RPCError
from nri_api.stub import OnClose, Plugin, RuntimeInfo, resolve_identity
from nri_resmgr.control.host_reset import (
    read_allowed_sets,
    remove_owned_rdt_groups,
    restore_cpu_class_files,
)
from nri_resmgr.kube.uninstall import (
    DaemonSetProbe,
    Handoff,
    block_termination,
    wait_for_termination,
    wait_port_closed,
)
from nri_resmgr.ops.reset import ResetError, ResetPlan, Verdict, plan_reset
from nri_resmgr.topology.cpuset import CPUSet, NodeSet

NAME = "reset"


HELP = "send every pinned container back to all CPUs and memory nodes; remove our RDT groups"


DEFAULT_INDEX = "99"


DEFAULT_NAME = "resmgr-reset"


DEFAULT_TIMEOUT = 30.0


DEFAULT_SOCKET = "/var/run/nri/nri.sock"


ENABLE_HINT = (
    "is NRI enabled in the runtime (`nri-resmgr enable-nri`, then restart it) and is "
    "--socket the runtime's NRI socket?"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--socket", default=DEFAULT_SOCKET, help=f"NRI socket path (default {DEFAULT_SOCKET})"
    )
    parser.add_argument(
        "--plugin-index",
        default=DEFAULT_INDEX,
        help=f"two-digit plugin index (default {DEFAULT_INDEX})",
    )
    parser.add_argument(
        "--plugin-name", default=DEFAULT_NAME, help=f"plugin name (default {DEFAULT_NAME})"
    )
    parser.add_argument("--sysfs-root", default="/", help="root directory holding sys/ (default /)")
    parser.add_argument(
        "--state-dir",
        help="where the daemon's ownership records live (default /var/lib/nri-resmgr)",
    )
    parser.add_argument("--resctrl-root", help="resctrl mount point (default /sys/fs/resctrl)")
    parser.add_argument("--no-resctrl", action="store_true", help="leave the resctrl groups alone")
    parser.add_argument(
        "--keep",
        action="append",
        default=[],
        metavar="CONTAINER_ID",
        help="leave this container's cpuset alone (repeatable)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help=f"seconds for connecting, synchronizing and updating (default {DEFAULT_TIMEOUT:g})",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="connect and show what would be reset, change nothing",
    )
    parser.add_argument(
        "--verbose", "-v", action="store_true", help="also list the containers left alone, and why"
    )
    helm = parser.add_argument_group(
        "on uninstall",
        "the Helm chart's mode: wait for SIGTERM, reset only if the DaemonSet is being removed",
    )
    helm.add_argument(
        "--on-uninstall",
        metavar="NAMESPACE/DAEMONSET",
        help="wait for SIGTERM, then reset only if this DaemonSet is gone or being deleted",
    )
    helm.add_argument(
        "--wait-port",
        metavar="HOST:PORT",
        help="before resetting, wait (up to half of --timeout) until nothing accepts connections "
        "here (the daemon's HTTP port: it has exited)",
    )
    helm.add_argument("--kubeconfig", help="kubeconfig file (default $KUBECONFIG, else in-cluster)")
    helm.add_argument(
        "--handoff-dir",
        metavar="DIR",
        help="a directory shared with the preStop hook: the UID read at start-up goes there, "
        "and the hook's report is printed on SIGTERM instead of judging again",
    )
    helm.add_argument(
        "--prestop",
        action="store_true",
        help="run as the container's preStop hook: judge and reset now, without waiting for "
        "SIGTERM, with the UID from --handoff-dir; leave the report there",
    )


class _Problems(logging.Handler):
    """Collects the stub's warnings and errors, to tell the user why the runtime refused."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


class ResetPlugin(Plugin):
    """Registers, takes Synchronize's view of the node, answers it with no updates."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.synced = asyncio.Event()
        self.pods: list[api.PodSandbox] = []
        self.containers: list[api.Container] = []
        self.runtime_info: RuntimeInfo | None = None

    def configure(self, config: str, runtime: RuntimeInfo) -> None:
        self.runtime_info = runtime

    def synchronize(
        self, pods: Sequence[api.PodSandbox], containers: Sequence[api.Container]
    ) -> None:
        self.pods, self.containers = list(pods), list(containers)
        self.synced.set()

    # The runtime wants at least one event; this one changes nothing and cannot fail.
    def remove_container(self, pod: api.PodSandbox, container: api.Container) -> None:
        return None


@dataclass(slots=True)
class ResetOutcome:
    """What happened on the node; `failures` non-empty means exit status 1."""

    runtime: str = ""
    plan: ResetPlan | None = None
    failed_updates: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


def _connect(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except FileNotFoundError as exc:
        sock.close()
        raise ResetError(
            f"NRI socket {path}: expected the runtime to listen there; "
            f"found no such file ({ENABLE_HINT})"
        ) from exc
    except ConnectionRefusedError as exc:
        sock.close()
        raise ResetError(
            f"NRI socket {path}: expected the runtime to accept a connection; "
            "found nobody listening (a stale socket: is the runtime running?)"
        ) from exc
    except OSError as exc:
        sock.close()
        raise ResetError(f"NRI socket {path}: expected to connect; found {exc}") from exc
    sock.setblocking(False)
    return sock


async def sync_and_reset(
    *,
    socket_path: str,
    index: str,
    name: str,
    cpus: CPUSet,
    mems: NodeSet,
    keep: Sequence[str] = (),
    timeout: float = DEFAULT_TIMEOUT,
    dry_run: bool = False,
) -> ResetOutcome:
    """Steps 2-3 of the module docstring; raises ResetError when the runtime fails us."""
    outcome = ResetOutcome()
    try:
        resolve_identity(name=name, idx=index, environ={}, argv0="")
    except ValueError as exc:
        raise ResetError(f"reset plugin identity: {exc}") from exc
    sock = _connect(socket_path)
    problems = _Problems()
    log = logging.getLogger(f"nri_resmgr.reset.{index}-{name}")
    log.addHandler(problems)
    log.propagate = False
    plugin = ResetPlugin(
        name=name,
        idx=index,
        connection=sock,
        on_close=OnClose.EXIT,
        logger=log,
        environ={},
    )
    serving = asyncio.create_task(plugin.serve(), name="nri-resmgr-reset")
    try:
        try:
            async with asyncio.timeout(timeout):
                synced = asyncio.create_task(plugin.synced.wait())
                await asyncio.wait({serving, synced}, return_when=asyncio.FIRST_COMPLETED)
                synced.cancel()
                if not plugin.synced.is_set():
                    why = "; ".join(problems.messages) or "the connection closed"
                    raise ResetError(
                        f"runtime at {socket_path}: expected registration, "
                        f"Configure and Synchronize; found: {why}"
                    )
                rt = plugin.runtime_info
                if rt is not None:
                    outcome.runtime = f"{rt.name} {rt.version} (NRI {rt.nri_version})"
                plan = plan_reset(plugin.pods, plugin.containers, cpus=cpus, mems=mems, keep=keep)
                outcome.plan = plan
                if plan.updates and not dry_run:
                    try:
                        failed = await plugin.update_containers(plan.updates, timeout=timeout)
                    except (RPCError, ConnectionClosed) as exc:
                        raise ResetError(
                            f"runtime at {socket_path}: expected UpdateContainers of "
                            f"{len(plan.updates)} containers to be answered; found {exc}"
                        ) from exc
                    outcome.failed_updates = [u.container_id for u in failed or ()]
        except TimeoutError as exc:
            step = "UpdateContainers" if outcome.plan is not None else "Synchronize"
            raise ResetError(
                f"runtime at {socket_path}: expected {step} within {timeout:g} s; found no answer"
            ) from exc
    finally:
        await plugin.stop()
        await asyncio.wait({serving}, timeout=5.0)
        serving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await serving
        log.removeHandler(problems)
    for cid in outcome.failed_updates:
        outcome.failures.append(f"container {cid}: the runtime could not apply the reset")
    return outcome


def _print_outcome(outcome: ResetOutcome, *, dry_run: bool, verbose: bool) -> None:
    plan = outcome.plan
    if plan is None:
        return
    verb = "would reset" if dry_run else "reset"
    total = len(plan.reset) + len(plan.kept)
    print(
        f"runtime {outcome.runtime or '(unknown)'}: {total} containers, "
        f"{len(plan.reset)} pinned; allowed cpus {plan.cpus}, mems {plan.mems}"
    )
    failed = set(outcome.failed_updates)
    for r in plan.reset:
        mark = "FAILED " if r.container_id in failed else ""
        print(
            f"{mark}{verb} {r.subject} ({r.container_id[:12]}): cpus {r.cpus or '-'} -> "
            f"{plan.cpus}, mems {r.mems or '-'} -> {plan.mems}"
        )
    if verbose:
        for k in plan.kept:
            print(f"left {k.subject} ({k.container_id[:12]}): {k.reason}")


def run(args: argparse.Namespace) -> int:
    try:
        cpus, mems = read_allowed_sets(Path(args.sysfs_root))
    except ResetError as exc:
        print(f"reset: {exc}", file=sys.stderr)
        return 2
    if args.prestop:
        if not (args.on_uninstall and args.handoff_dir):
            print("reset: --prestop: expected --on-uninstall and --handoff-dir", file=sys.stderr)
            return 2
        handoff = Handoff(args.handoff_dir)
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            status = _run(args, cpus, mems, handoff)
        handoff.finish(out.getvalue(), status)
        sys.stdout.write(out.getvalue())
        return status
    return _run(args, cpus, mems, Handoff(args.handoff_dir) if args.handoff_dir else None)


def _run(args: argparse.Namespace, cpus: CPUSet, mems: NodeSet, handoff: Handoff | None) -> int:
    if args.on_uninstall:
        if not args.prestop:
            block_termination()
        try:
            probe = DaemonSetProbe(args.on_uninstall, kubeconfig=args.kubeconfig)
        except ResetError as exc:
            print(f"reset: {exc}", file=sys.stderr)
            return 2
        if args.prestop:
            assert handoff is not None
            started_uid, event = handoff.started_uid(), "preStop"
        else:
            started_uid = probe.uid()
            if handoff is not None:
                try:
                    handoff.record_uid(started_uid)
                except ResetError as exc:
                    print(f"reset: {exc}", file=sys.stderr)
                    return 2
            print(
                f"waiting for SIGTERM; then resetting if DaemonSet {args.on_uninstall} "
                f"(uid {started_uid}) is being removed",
                flush=True,
            )
            event = signal.Signals(wait_for_termination()).name
            report = handoff.report() if handoff is not None else None
            if report is not None:
                print(f"{event}: the preStop hook judged already:\n{report.rstrip()}", flush=True)
                return 0
        verdict, why = probe.verdict(started_uid)
        print(f"{event}: {why}", flush=True)
        if verdict is Verdict.KEEP:
            print("containers left to the next daemon")
            return 0
        if verdict is Verdict.UNKNOWN:
            print(
                "reset: nothing reset; run `nri-resmgr reset` on the node if this was an uninstall",
                file=sys.stderr,
            )
            return 1
    budget_start = time.monotonic()
    if args.wait_port:
        try:
            # half the budget: the daemon exits within a second of its SIGTERM
            gone = wait_port_closed(args.wait_port, timeout=args.timeout / 2)
        except ResetError as exc:
            print(f"reset: {exc}", file=sys.stderr)
            return 2
        if not gone:
            print(
                f"reset: the daemon still listens at {args.wait_port} after "
                f"{args.timeout / 2:g} s; resetting anyway",
                file=sys.stderr,
            )
    started = time.monotonic()
    try:
        outcome = asyncio.run(
            sync_and_reset(
                socket_path=args.socket,
                index=args.plugin_index,
                name=args.plugin_name,
                cpus=cpus,
                mems=mems,
                keep=args.keep,
                timeout=max(args.timeout - (time.monotonic() - budget_start), 1.0),
                dry_run=args.dry_run,
            )
        )
    except ResetError as exc:
        print(f"reset: {exc}", file=sys.stderr)
        return 1
    _print_outcome(outcome, dry_run=args.dry_run, verbose=args.verbose)
    if not args.no_resctrl:
        # the daemon's defaults; imported here: the chart's reset container idles until
        # SIGTERM and need not hold the daemon's modules in memory meanwhile
        from nri_resmgr.runtime.assembly import DEFAULT_RESCTRL_ROOT, DEFAULT_STATE_DIR

        try:
            groups = remove_owned_rdt_groups(
                resctrl_root=Path(args.resctrl_root or DEFAULT_RESCTRL_ROOT),
                state_dir=Path(args.state_dir or DEFAULT_STATE_DIR),
                dry_run=args.dry_run,
            )
        except ResetError as exc:
            outcome.failures.append(str(exc))
        else:
            verb = "would remove" if args.dry_run else "removed"
            for g in groups:
                print(f"{verb} resctrl group {g}")
    from nri_resmgr.runtime.assembly import DEFAULT_STATE_DIR

    restored = restore_cpu_class_files(
        sysfs_root=Path(args.sysfs_root),
        state_dir=Path(args.state_dir or DEFAULT_STATE_DIR),
        dry_run=args.dry_run,
    )
    verb = "would restore" if args.dry_run else "restored"
    for f in restored:
        print(f"{verb} CPU class file {f}")
    for failure in outcome.failures:
        print(f"reset: {failure}", file=sys.stderr)
    print(
        f"done in {time.monotonic() - started:.2f} s"
        + (" (dry run: nothing changed)" if args.dry_run else "")
    )
    return 1 if outcome.failures else 0
