"""The daemon under test on a real runtime, and its placements read back from the kernel.

`Daemon` is one `nri-resmgr run` process (an external plugin, index 90, the real sysfs
unless a synthetic one is given, its own state dir under the runtime's private base) and
how to kill and restart it; the `daemon` fixture makes them from a configuration (debug
logs, copied to ``.cache/e2e/logs/`` at teardown) and `running_daemon` starts one and
waits for its first Synchronize.  `STATIC` and `TOPOLOGY_AWARE` are the configurations of
the 2-CPU machine class (CPU 0 reserved).

Placements are read from the container's cgroup (`cri.cpus_of`): `await_cpus` waits for
one container's cpuset, `settled_cpusets` for every container's to stop changing,
`assert_no_double_exclusive` checks that no exclusive CPU is in another cpuset.

A restart is followed precisely, without settle windows: `restarted` waits for the
runtime's log to show the new daemon's Synchronize (`Daemon.wait_synced_since_start`;
containerd applies the reply's updates before it logs it), reads the daemon's decisions
from its log (`synchronized_in`: each container's reason and CPUs) and checks that the
kernel shows exactly those CPUs.  `check_restart_rule` is then the restart rule on the
static policy's cpusets.  `Cpusets` reads containers' cpusets without a crictl call per
read and `LogTail` reads only what a log gained since the start, so the kill -9 rounds
can do this hundreds of times at the same cost each.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import cri
from tests.e2e.conftest import (
    Process,
    python,
    python_env,
    synchronized_line,
    wait_plugin_synchronized,
)
from tests.e2e.containerd import CACHE, Containerd
from tests.support.requirements import online_cpus, require_two_cpus
from tests.support.waiting import wait_for

PLUGIN = "90-resmgr"
#: containerd's default is 5 s. The daemon registers in about 0.4 s, but its start-up is
#: CPU-bound and took 2.5-3.7 s on this 2-CPU machine at load 17 (before the import
#: work), so the tests, which assert behaviour rather than speed, allow more; they record
#: the real start-up time in .cache/e2e/latency/preregistered-startup.jsonl instead.
PREREG_REGISTRATION_TIMEOUT = "20s"
STATIC = {"policy": "static", "policyConfig": {"reservedSystemCPUs": "0"}}
TOPOLOGY_AWARE = {"policy": "topology-aware", "policyConfig": {"reservedResources": {"cpu": "cpuset:0"}}}  # noqa: E501


@dataclass
class LogTail:
    """What was appended to a log file since a mark: a restart's lines without reading
    the whole log again (containerd's grows by about 45 kB a kill -9 round)."""

    path: Path
    offset: int = 0

    def mark(self) -> None:
        """From now on: what is in the file so far is not new."""
        self.offset = self.path.stat().st_size if self.path.exists() else 0

    def new_lines(self) -> list[str]:
        """The whole lines appended since the mark or the last call."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        whole = data[: data.rfind(b"\n") + 1]
        self.offset += len(whole)
        return whole.decode(errors="replace").splitlines()


@dataclass
class Daemon:
    """One `nri-resmgr run` process (external plugin) and how to restart it."""

    ctd: Containerd
    spawn: Callable[..., Process]
    config: Path
    log: Path
    proc: Process | None = None
    starts: int = 0
    #: where the daemon discovers the machine (a synthetic sysfs can mark CPUs isolated)
    sysfs_root: str = "/"
    #: the runtime's and the daemon's log since the last `start`
    runtime_since_start: LogTail = field(init=False)
    output_since_start: LogTail = field(init=False)

    def __post_init__(self) -> None:
        self.runtime_since_start = LogTail(self.ctd.layout.log)
        self.output_since_start = LogTail(self.log)

    @property
    def state_dir(self) -> Path:
        return self.ctd.layout.base / "resmgr-state"

    def start(self) -> Daemon:
        argv = [
            python(), "-m", "nri_resmgr.cli", "run",
            "--config", str(self.config),
            "--socket", str(self.ctd.layout.nri_socket),
            "--plugin-index", "90", "--plugin-name", "resmgr",
            "--sysfs-root", self.sysfs_root,
            "--state-dir", str(self.state_dir),
        ]  # fmt: skip
        self.runtime_since_start.mark()
        self.output_since_start.mark()
        self.proc = self.spawn(argv, self.log, python_env())
        self.starts += 1
        return self

    def wait_synced(self, count: int | None = None) -> None:
        wait_plugin_synchronized(
            self.ctd, PLUGIN, count=count or self.synced_so_far() + 1, proc=self.proc
        )

    def wait_synced_since_start(self, timeout: float = 180.0) -> None:
        """Wait for the runtime to log this start's Synchronize, reading only the lines
        logged since `start` (containerd applies the reply's updates before it logs it).
        The timeout is generous: a machine short of memory (another job's) has taken a
        minute to start the daemon, and this asserts behaviour, not speed."""
        deadline = time.monotonic() + timeout
        while not any(synchronized_line(ln, PLUGIN) for ln in self.runtime_since_start.new_lines()):
            if self.proc is None or not self.proc.alive():
                raise AssertionError(f"plugin {PLUGIN} exited:\n{self.output()[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"containerd did not synchronize {PLUGIN} within {timeout} s of start "
                    f"{self.starts}:\n{self.ctd.log_tail(40)}\n--- plugin output ---\n"
                    f"{self.output()[-3000:]}\n--- plugin stacks ---\n{self.proc.stacks()}"
                )
            time.sleep(0.05)

    def synced_so_far(self) -> int:
        return sum(1 for ln in self.ctd.log_text().splitlines() if synchronized_line(ln, PLUGIN))

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill9()

    def output(self) -> str:
        return self.proc.output() if self.proc else ""


@pytest.fixture
def daemon(
    containerd: Containerd, processes: Callable[..., Process]
) -> Iterator[Callable[[dict[str, Any]], Daemon]]:
    require_two_cpus()
    made: list[Daemon] = []

    def make(config: dict[str, Any]) -> Daemon:
        path = containerd.layout.base / f"resmgr-{len(made)}.json"
        path.write_text(json.dumps({**config, "log": {"level": "debug"}}))
        d = Daemon(containerd, processes, path, containerd.layout.base / "resmgr.log")
        made.append(d)
        return d

    yield make
    for d in made:
        if d.log.exists():
            dest = CACHE / "logs"
            dest.mkdir(parents=True, exist_ok=True)
            (dest / f"{containerd.layout.base.name}-resmgr.log").write_text(d.output())


def running_daemon(make: Callable[[dict[str, Any]], Daemon], config: dict[str, Any]) -> Daemon:
    """A daemon of `config`, started and synchronized once."""
    d = make(config).start()
    d.wait_synced(1)
    return d


def web_and_db(ctd: Containerd) -> tuple[cri.Container, cri.Container]:
    """The fault tests' opening: a Burstable `web/app` and a Guaranteed 1-CPU `db/pg`."""
    web = cri.run_pod(ctd, "web")
    b = cri.run_container(ctd, web, "app", resources=cri.BURSTABLE_SMALL)
    db = cri.run_pod(ctd, "db", qos=cri.QoS.GUARANTEED)
    return b, cri.run_container(ctd, db, "pg", resources=cri.GUARANTEED_1CPU)


def await_cpus(ctd: Containerd, c: cri.Container, want: str, why: str) -> None:
    wait_for(
        lambda: cri.cpus_of(ctd, c) == want,
        timeout=15,
        what=f"{c.pod.name}/{c.name} cpuset.cpus == {want} ({why})",
    )


def assert_no_double_exclusive(ctd: Containerd, exclusive: dict[str, cri.Container],
                               others: list[cri.Container]) -> None:  # fmt: skip
    """No CPU of an exclusive container appears in any other container's cpuset."""
    held: dict[int, str] = {}
    for name, c in exclusive.items():
        for cpu in cri.parse_cpus(cri.cpus_of(ctd, c)):
            assert cpu not in held, f"CPU {cpu} exclusive to both {held[cpu]} and {name}"
            held[cpu] = name
    for c in others:
        overlap = cri.parse_cpus(cri.cpus_of(ctd, c)) & set(held)
        assert not overlap, (
            f"{c.pod.name}/{c.name} runs on {sorted(overlap)}, exclusive to "
            f"{[held[x] for x in sorted(overlap)]}"
        )


# -- the restart rule ---------------------------------------------------------------------


def settled_cpusets(
    ctd: Containerd, containers: list[cri.Container]
) -> dict[str, frozenset[int]]:
    """Every container's cpuset.cpus from the kernel, once they stop changing."""

    def read() -> dict[str, frozenset[int]]:
        return {c.id: cri.parse_cpus(cri.cpus_of(ctd, c)) for c in containers}

    def steady() -> dict[str, frozenset[int]] | None:
        first = read()
        time.sleep(1.0)
        return first if read() == first else None

    found: dict[str, frozenset[int]] = wait_for(
        steady, timeout=30, what="cpusets to stop changing"
    )
    return found


class Cpusets:
    """Containers' cpuset.cpus read from the kernel, crictl asked each container's init
    pid once (a `crictl inspect` per read made the kill -9 rounds' checks cost seconds).
    Each read checks that the pid's cpuset cgroup still names the container, so a pid
    reused after the container went cannot be read instead, and that the cgroup's CPUs
    are the ones its process is allowed (as `cri.cpus_of` does)."""

    def __init__(self, ctd: Containerd) -> None:
        self.ctd = ctd
        self.pids: dict[str, int] = {}

    def read(self, containers: list[cri.Container]) -> dict[str, frozenset[int]]:
        return {c.id: self.of(c) for c in containers}

    def pid(self, c: cri.Container) -> int:
        """The container's init pid (crictl asked once)."""
        if c.id not in self.pids:
            self.pids[c.id] = cri.container_pid(self.ctd, c)
        return self.pids[c.id]

    def of(self, c: cri.Container) -> frozenset[int]:
        pid = self.pid(c)
        assert Path(f"/proc/{pid}").exists(), (
            f"{c.pod.name}/{c.name}: its process {pid} is gone, killed from outside the test "
            "(the kernel's OOM killer takes a container of oom_score_adj 1000 first: see dmesg)"
        )
        where = cri.cgroup_dir(pid, "cpuset")
        assert c.id in where.name, (
            f"{c.pod.name}/{c.name}: pid {pid} is in cpuset cgroup {where}, not the container's"
        )
        view = cri.kernel_view_of(pid)
        assert view.cpus == view.allowed_cpus, (
            f"{c.pod.name}/{c.name}: cgroup cpuset.cpus {view.cpus!r} but the process is "
            f"allowed {view.allowed_cpus!r}"
        )
        return cri.parse_cpus(view.cpus)


def check_restart_rule(
    cpus: Mapping[str, frozenset[int]], live: list[tuple[cri.Container, cri.QoS]], log: Path
) -> list[cri.Container]:
    """The restart rule on cpusets read from the kernel (static on CPUs 0-1, CPU 0
    reserved).

    All shared containers run on one shared pool; a Guaranteed container whose cpuset
    is not that pool holds its CPUs exclusively, and no other container may have any
    of them; every cpuset is online CPUs and not empty. Returns the exclusive holders.
    """
    table = "\n".join(
        f"  {c.pod.name}/{c.name} {q.value}: {sorted(cpus[c.id])}" for c, q in live
    )
    pools = {cpus[c.id] for c, q in live if q is not cri.QoS.GUARANTEED}
    assert len(pools) == 1, f"shared containers on different cpusets:\n{table}\ndaemon log: {log}"
    (shared,) = pools
    holders = [c for c, q in live if q is cri.QoS.GUARANTEED and cpus[c.id] != shared]
    held: dict[int, str] = {}
    for c in holders:
        for cpu in cpus[c.id]:
            assert cpu not in held, (
                f"CPU {cpu} exclusive to both {held[cpu]} and {c.pod.name}/{c.name}:\n{table}"
                f"\ndaemon log: {log}"
            )
            held[cpu] = f"{c.pod.name}/{c.name}"
    for c, _ in live:
        overlap = set() if c in holders else cpus[c.id] & set(held)
        assert not overlap, (
            f"{c.pod.name}/{c.name} runs on {sorted(overlap)}, exclusive to "
            f"{[held[x] for x in sorted(overlap)]}:\n{table}\ndaemon log: {log}"
        )
        assert cpus[c.id] and cpus[c.id] <= online_cpus(), f"{table}\ndaemon log: {log}"
    return holders


@dataclass(frozen=True, slots=True)
class Synchronized:
    """What one Synchronize decided, from the daemon's log: each container's reason and
    CPUs (its ``synchronize`` lines) and the whole rebuild's reason (its ``rebuilt`` line)."""

    rebuilt: str
    reasons: dict[str, str]
    cpus: dict[str, frozenset[int]]


def synchronized_in(lines: list[str], ids: list[str]) -> Synchronized | None:
    """The Synchronize in `lines` once its ``rebuilt`` line and a decision for each of
    `ids` are there (the daemon writes them just after its reply; callers poll), else None."""
    rebuilt: str | None = None
    reasons: dict[str, str] = {}
    cpus: dict[str, frozenset[int]] = {}
    for line in lines:
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if not isinstance(doc, dict):
            continue
        if doc.get("event") == "synchronize" and "id" in doc:
            reasons[str(doc["id"])] = str(doc.get("reason", ""))
            cpus[str(doc["id"])] = cri.parse_cpus(str(doc.get("cpus", "")))
        if doc.get("event") == "rebuilt":
            rebuilt = str(doc.get("reason", ""))
    if rebuilt is None or any(i not in reasons for i in ids):
        return None
    return Synchronized(rebuilt, reasons, cpus)


def restarted(
    d: Daemon, kernel: Cpusets, containers: list[cri.Container], what: str
) -> tuple[Synchronized, dict[str, frozenset[int]]]:
    """The Synchronize of the daemon just started, and the cpusets it left: waits for the
    runtime to log it (containerd applies the reply's updates before), then for the
    daemon's decisions on `containers`, and checks that the kernel shows exactly what
    the daemon decided.  No settle window: nothing else moves them until the next event."""
    d.wait_synced_since_start()
    lines: list[str] = []

    def decided() -> Synchronized | None:
        lines.extend(d.output_since_start.new_lines())
        return synchronized_in(lines, [c.id for c in containers])

    sync: Synchronized = wait_for(decided, timeout=30, what=f"{what}: the daemon's decisions")
    after = kernel.read(containers)
    for c in containers:
        assert after[c.id] == sync.cpus[c.id], (
            f"{what}: {c.pod.name}/{c.name} runs on {sorted(after[c.id])} once synchronized, "
            f"but the daemon decided {sorted(sync.cpus[c.id])}; daemon log: {d.log}"
        )
    return sync, after
