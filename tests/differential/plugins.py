"""One side of a differential run: a fake runtime (the real NRI library) and one plugin.

Theory of operation: a `Side` owns a `GoRuntime` of NRI `VERSION` and one external
plugin process, either nri-plugins' binary (``theirs``, `theirs_argv`) or our daemon
(``ours``, `ours_argv`, through `bench/plugins/resmgr.py`), both on the same host root
and the same configuration file (our daemon reads nri-plugins' custom resource form
unchanged). The side keeps what a runtime knows of every container it created: the pod
and container messages, and the cpuset CPUs and memory nodes the plugin last set, from
the CreateContainer adjustment, the updates in event replies, the UpdateContainers calls
it made on its own and, after a restart, the Synchronize reply. `restart()` stops the
plugin, reports the containers as they run now (`set_state`) and starts a new plugin
process on the same state directory, as a DaemonSet rollout would.

bench/peers.py starts its peers with the same argv functions.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import spawn
from nri_resmgr.topology.cpuset import IDSet
from tests.conformance.harness import (
    GoRuntime,
    Json,
    RuntimeCallError,
    SyncResult,
    prune_empty,
    short_tempdir,
)
from tests.conformance.harness_build import build_harness

__all__ = ["VERSION", "Held", "Placement", "Side", "ours_argv", "side", "theirs_argv"]

VERSION = "v0.12.2"
REPO = Path(__file__).resolve().parents[2]
DAEMON = REPO / "bench" / "plugins" / "resmgr.py"
#: generous: a slow shared machine must not turn into a disconnect and a difference
REQUEST_TIMEOUT_MS = 60_000
#: how long a plugin may take to start and synchronize, and how often it is looked at
SYNC_TIMEOUT = 60.0
SYNC_POLL = 1.0
IDX = "90"


def theirs_argv(
    binary: Path, *, socket: Path, config: Path, root: Path, state_dir: Path, name: str
) -> list[str]:
    """nri-plugins' plugin as an external plugin: no Kubernetes API, its config from a file,
    its machine from `root`."""
    return [
        str(binary),
        "--config-file",
        str(config),
        "--nri-socket",
        str(socket),
        "--nri-plugin-index",
        IDX,
        "--nri-plugin-name",
        name,
        "--host-root",
        str(root),
        "--state-dir",
        str(state_dir),
        "--pid-file",
        str(state_dir / "plugin.pid"),
    ]


def ours_argv(
    *, socket: Path, config: Path, root: Path, state_dir: Path, name: str
) -> list[str]:
    """Our daemon (`nri-resmgr run`) as an external plugin on the same host root."""
    return [
        sys.executable,
        str(DAEMON),
        "--socket",
        str(socket),
        "--idx",
        IDX,
        "--name",
        name,
        "--config",
        str(config),
        "--sysfs-root",
        str(root),
        "--state-dir",
        str(state_dir),
    ]


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a container may run: cpuset CPUs and memory nodes ("" = not set: all)."""

    cpus: str = ""
    mems: str = ""

    def __str__(self) -> str:
        return f"cpus {self.cpus or '(unset)'} mems {self.mems or '(unset)'}"


#: what a side holds for a container: its placement, or the text of its refusal
Held = Placement | str


def _canon(ids: str) -> str:
    return str(IDSet.parse(ids)) if ids.strip() else ""


def _resources(msg: Mapping[str, Any]) -> Mapping[str, Any]:
    cpu: Mapping[str, Any] = msg.get("linux", {}).get("resources", {}).get("cpu", {})
    return cpu


#: the lock every differential run takes around starting nri-plugins' plugin (`Side.launch`)
THEIRS_START_LOCK = Path("/tmp/nri-diff-theirs-start.lock")
#: how long a started plugin may take to write its pid file
PID_FILE_TIMEOUT = 20.0


def their_pid_file(binary: str) -> Path:
    """Where nri-plugins' plugin `binary` writes its pid file whatever ``--pid-file`` says
    (their pidfile.defaultPath): /var/run as root, else /tmp."""
    return Path("/var/run" if os.geteuid() == 0 else "/tmp") / f"{Path(binary).name}.pid"


@contextlib.contextmanager
def _start_lock(take: bool) -> Iterator[None]:
    if not take:
        yield
        return
    with THEIRS_START_LOCK.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _wait_pid_file(proc: subprocess.Popen[bytes], path: Path) -> None:
    """Until `path` names `proc` (or it exits, or `PID_FILE_TIMEOUT` passes)."""
    deadline = time.monotonic() + PID_FILE_TIMEOUT
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            if path.read_text().strip() == str(proc.pid):
                return
        except OSError:
            pass
        time.sleep(0.05)


class Side:
    """A runtime and one plugin; what the runtime knows of its containers."""

    def __init__(self, rt: GoRuntime, argv: list[str], *, who: str) -> None:
        self.rt = rt
        self.argv = argv
        self.who = who
        self.proc: subprocess.Popen[bytes] | None = None
        self.pods: dict[str, Json] = {}
        self.ctrs: dict[str, tuple[Json, Json]] = {}  # id -> (pod, container)
        self.placements: dict[str, Placement] = {}
        self.starts = 0

    # -- the plugin process --

    @property
    def log(self) -> Path:
        return self.rt.dir / f"{self.who}.log"

    def log_tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else "(no log)"

    def launch(self) -> None:
        """Start the plugin and wait for its Synchronize; apply what it returned.

        nri-plugins' plugin ignores ``--pid-file`` (its flag is parsed, never applied)
        and removes, then exclusively creates, ``/var/run/<binary>.pid`` as it starts:
        two of its plugins starting at once (two cases of a run, another run on the
        machine) make one exit with "file exists". Their starts are therefore taken one
        at a time under a lock shared by every process (`THEIRS_START_LOCK`), each held
        until its pid file names it."""
        self.starts += 1
        with _start_lock(self.who == "theirs"):
            self.proc = spawn(self.argv, log_path=self.log, cwd=self.rt.dir)
            self.rt.externals.append(self.proc)
            sync = self._wait_synced()
            if self.who == "theirs":
                _wait_pid_file(self.proc, their_pid_file(self.argv[0]))
        for update in sync.updates:
            self._apply_update(update)
        self.drain()

    def _wait_synced(self) -> SyncResult:
        deadline = time.monotonic() + SYNC_TIMEOUT
        while True:
            try:
                return self.rt.wait_synced(timeout=SYNC_POLL)
            except RuntimeCallError as exc:
                # a plugin that exits (a configuration it refuses) never synchronizes:
                # say so at once rather than at the deadline
                why = self.alive()
                if why or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{self.who} did not synchronize (start {self.starts}): "
                        f"{why or exc}\n{self.log_tail()}"
                    ) from exc

    def restart(self) -> None:
        """Stop the plugin; report the containers as running with their cpusets; start it."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.rt.set_state(pods=list(self.pods.values()), containers=self._running())
        self.launch()

    def alive(self) -> str | None:
        """None while the plugin runs, else what happened, with its log."""
        if self.proc is not None and self.proc.poll() is not None:
            return f"{self.who} exited with {self.proc.returncode}\n{self.log_tail()}"
        return None

    def _running(self) -> list[Json]:
        out = []
        for cid, (_pod, ctr) in self.ctrs.items():
            reported = dict(ctr, state="CONTAINER_RUNNING")
            place = self.placements.get(cid, Placement())
            linux = dict(reported.get("linux", {}))
            resources = dict(linux.get("resources", {}))
            cpu = dict(resources.get("cpu", {}))
            if place.cpus:
                cpu["cpus"] = place.cpus
            if place.mems:
                cpu["mems"] = place.mems
            resources["cpu"] = cpu
            linux["resources"] = resources
            reported["linux"] = linux
            out.append(reported)
        return out

    # -- what the runtime learns --

    def _apply_update(self, update: Mapping[str, Any]) -> None:
        cid = str(update.get("container_id", ""))
        if cid not in self.placements:
            return
        cpu = _resources(update)
        old = self.placements[cid]
        self.placements[cid] = Placement(
            _canon(cpu["cpus"]) if cpu.get("cpus") else old.cpus,
            _canon(cpu["mems"]) if cpu.get("mems") else old.mems,
        )

    def _apply_reply(self, reply: Mapping[str, Any]) -> None:
        for update in prune_empty(dict(reply)).get("update", []):
            self._apply_update(update)

    def drain(self) -> None:
        """Apply the UpdateContainers calls the plugin made on its own."""
        for call in self.rt.updates():
            for update in call:
                self._apply_update(update)

    # -- events --

    def run_pod(self, pod: Json) -> None:
        self.pods[pod["id"]] = pod
        self.rt.run_pod(pod)

    def create(self, pod: Json, ctr: Json) -> str | None:
        """Create and start a container; None, or the refusal's text."""
        try:
            reply = self.rt.create_container(pod, ctr)
        except RuntimeCallError as exc:
            self.drain()
            return exc.message
        cpu = _resources(prune_empty(reply).get("adjust", {}))
        self.ctrs[ctr["id"]] = (pod, ctr)
        self.placements[ctr["id"]] = Placement(
            _canon(str(cpu.get("cpus", ""))), _canon(str(cpu.get("mems", "")))
        )
        self._apply_reply(reply)
        self.rt.start_container(pod, ctr)
        self.drain()
        return None

    def stop_remove(self, cid: str) -> None:
        """Stop and remove a container (a deleted pod's, or an init container's exit)."""
        pod, ctr = self.ctrs.pop(cid)
        self.placements.pop(cid)
        reply = self.rt.stop_container(pod, ctr)
        self._apply_reply(reply)
        self.rt.remove_container(pod, ctr)
        self.drain()

    def remove_pod(self, pod_id: str) -> None:
        pod = self.pods.pop(pod_id)
        self.rt.stop_pod(pod)
        self.rt.remove_pod(pod)
        self.drain()


@contextlib.contextmanager
def side(argv_for: Any, *, who: str) -> Iterator[Side]:
    """A started side: `argv_for(socket)` names the plugin's command line."""
    binary = build_harness(VERSION)
    with short_tempdir(f"nri-diff-{who}-") as d, GoRuntime(
        version=VERSION, dir=d, binary=binary
    ) as rt:
        rt.start(request_timeout_ms=REQUEST_TIMEOUT_MS)
        s = Side(rt, argv_for(rt.socket, d), who=who)
        s.launch()
        yield s
