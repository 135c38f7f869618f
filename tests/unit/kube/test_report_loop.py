"""The node report's task: a change is written soon, a burst makes one write whose
object is the latest, nothing is written while nothing changes, failures are retried."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from nri_resmgr.kube.client import KubeError
from nri_resmgr.kube.nrt import Holding, NodeUse
from nri_resmgr.kube.report import ReportManager, TopologyReporter
from nri_resmgr.kube.report_loop import ReportLoop
from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.synthetic import build_topology

QUIET = structlog.wrap_logger(structlog.ReturnLogger())
TOPO = build_topology({"packages": 1, "nodes": 2, "cores": 2, "threads": 1, "memory": "1G"})


@dataclass
class Publisher:
    objects: list[Mapping[str, Any]] = field(default_factory=list)
    fail: int = 0

    def apply(self, path: str, obj: Mapping[str, Any], *, manager: str) -> dict[str, Any]:
        if self.fail:
            self.fail -= 1
            raise KubeError(503, "unavailable")
        self.objects.append(obj)
        return dict(obj)


@dataclass
class Daemon:
    """What the loop reads of the daemon: a state value replaced at every decision."""

    held: frozenset[int] = frozenset()
    state: object = field(default_factory=object)

    def grant(self, cpu: int) -> None:
        self.held = self.held | {cpu}
        self.state = object()

    def use(self) -> NodeUse:
        return NodeUse(
            policy="x",
            allowed=TOPO.online_cpus(),
            reserved=IDSet(),
            holdings=(Holding("ns", "p", "c", IDSet(self.held), IDSet(), 0),),
        )


def available(obj: Mapping[str, Any]) -> dict[str, str]:
    return {
        z["name"]: r["available"]
        for z in obj["zones"]
        for r in z["resources"]
        if r["name"] == "cpu"
    }


def _setup(pub: Publisher, min_interval: float) -> tuple[Daemon, ReportLoop, ReportManager]:
    daemon = Daemon()
    loop = ReportLoop(
        capture=lambda: daemon.use,
        seen=lambda: (daemon, daemon.state, frozenset()),
        interval=3600,
        poll=0.01,
        log=QUIET,
    )
    mgr = ReportManager("n", pub, min_interval=min_interval, clock=time.monotonic)
    mgr.register(TopologyReporter(TOPO, use=loop.current_use))
    return daemon, loop, mgr


async def _until(pred: Any) -> None:
    for _ in range(500):
        if pred():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("not reached")


def test_changes_are_written_coalesced_and_the_last_state_wins() -> None:
    pub = Publisher()
    daemon, loop, mgr = _setup(pub, min_interval=0.3)

    async def scenario() -> None:
        stop = threading.Event()
        task = asyncio.create_task(loop.run(mgr, stop))
        await _until(lambda: len(pub.objects) == 1)  # the first report
        assert available(pub.objects[0]) == {"node-0": "2", "node-1": "2"}
        for cpu in (0, 1, 2):  # a burst of three decisions
            daemon.grant(cpu)
            await asyncio.sleep(0.02)
        await _until(lambda: available(pub.objects[-1]) == {"node-0": "0", "node-1": "1"})
        await asyncio.sleep(0.5)  # nothing changes: nothing more is written
        stop.set()
        await task

    asyncio.run(asyncio.wait_for(scenario(), 20))
    # the burst made one write (or two: the first change may start one before the rest)
    assert 2 <= len(pub.objects) <= 3
    assert loop.writes == len(pub.objects)


def test_a_failed_write_is_retried() -> None:
    pub = Publisher(fail=2)
    _, loop, mgr = _setup(pub, min_interval=0.0)

    async def scenario() -> None:
        stop = threading.Event()
        task = asyncio.create_task(loop.run(mgr, stop))
        await _until(lambda: len(pub.objects) == 1)
        stop.set()
        await task

    asyncio.run(asyncio.wait_for(scenario(), 20))
    assert pub.fail == 0 and mgr.requests == 1


def test_current_use_before_a_reading_says_so() -> None:
    _, loop, _ = _setup(Publisher(), min_interval=0.0)
    try:
        loop.current_use()
    except RuntimeError as exc:
        assert "no NodeUse read yet" in str(exc)
    else:
        raise AssertionError("expected RuntimeError")
