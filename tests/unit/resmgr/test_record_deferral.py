"""Placement records written after the reply (`nri_resmgr.runtime.record_store`, `defer`).

The daemon's store queues each commit and writes once per event-loop turn, after the
reply: a burst of decisions is one flush and one appended block, with the same records
a store writing at every commit keeps; a `load`, a pipeline's `close` or its
replacement (`adopt`) writes what is queued first.  What a kill -9 before a turn's
flush leaves (the records of the turn before) never gives a wrong placement: for random
histories on the synthetic machines, cut anywhere, the restart from the lagging records
leaves every container where the restored state renders it once its updates are
applied, within the policy's invariants and the restart rule.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nri_resmgr.model import AllocationError, Assignment, ContainerID, ContainerInfo
from nri_resmgr.policy.decide import differs_from_current
from nri_resmgr.policy.kit.rebuild import restart
from nri_resmgr.policy.static import StaticPolicy
from nri_resmgr.policy.topology_aware import TopologyAwarePolicy, TopologyAwareState
from nri_resmgr.runtime.pipeline import Pipeline
from nri_resmgr.runtime.record_store import RECORD_FILE, RecordStore
from tests.support.builders import topo, with_current
from tests.support.logs import QUIET
from tests.support.pipeline import container, sandbox
from tests.support.restart_rule import applied, restart_violations
from tests.support.topology_aware import OPS, SYNTHETIC, Op, make

SCOPE = "static/abc"


class Turns:
    """A stand-in for the event loop's ``call_soon``: the writes put off, run on demand."""

    def __init__(self) -> None:
        self.queued: list[Callable[[], None]] = []

    def __call__(self, write: Callable[[], None]) -> None:
        self.queued.append(write)

    def end(self) -> int:
        """The turn ends: run what was put off; how many writes that was."""
        queued, self.queued = self.queued, []
        for write in queued:
            write()
        return len(queued)


def _static_pipeline(path: Path, defer: Turns | None = None) -> tuple[Pipeline, RecordStore]:
    store = RecordStore(path, scope=SCOPE, log=QUIET, defer=defer)
    policy = StaticPolicy(topology=topo(packages=1, nodes=1, cores=4, threads=1),
                          config={"reservedSystemCPUs": "0"})  # fmt: skip
    return Pipeline(policy, log=QUIET, record_store=store), store


def _on_disk(path: Path) -> set[str]:
    return set(RecordStore(path, scope=SCOPE, log=QUIET).load())


def _burst(p: Pipeline) -> None:
    """Three creations and a stop, answered in one turn: db-b and web-w stay."""
    db, web = sandbox("db"), sandbox("web", guaranteed=False)
    for pod in (db, web):
        p.run_pod(pod)
    a, w, b = (container(db, "a"), container(web, "w", cpu="500m"),
               container(db, "b"))  # fmt: skip
    for pod, c in ((db, a), (web, w), (db, b)):
        p.create(pod, c)
    p.stop(db, a)


def test_a_burst_is_written_once_after_the_turn_with_the_records_of_every_commit(
    tmp_path: Path,
) -> None:
    turns = Turns()
    deferred, store = _static_pipeline(tmp_path / "d" / RECORD_FILE, turns)
    at_once, reference = _static_pipeline(tmp_path / "n" / RECORD_FILE)
    _burst(deferred)
    _burst(at_once)
    assert not store.path.exists(), "nothing is written before the turn ends"
    assert turns.end() == 1, "one write for the whole burst"
    assert store.load() == reference.load()
    assert set(store.load()) == {"db-b", "web-w"}
    size = store.path.stat().st_size
    web = sandbox("web", guaranteed=False)
    deferred.create(web, container(web, "v", cpu="250m"))
    deferred.remove_pod(web)
    assert store.path.stat().st_size == size
    assert turns.end() == 1
    added = store.path.read_bytes()[size:]
    assert added.count(b"\n") == 1, "a burst after the first write is one appended block"
    assert set(store.load()) == {"db-b"}


def test_load_close_and_a_replacement_write_what_is_queued_first(tmp_path: Path) -> None:
    path = tmp_path / RECORD_FILE
    turns = Turns()
    first, store = _static_pipeline(path, turns)
    _burst(first)
    assert set(store.load()) == {"db-b", "web-w"}, "a load writes the queue first"
    db = sandbox("db")
    c = container(db, "c")
    first.create(db, c)
    second, _ = _static_pipeline(path, turns)
    second.adopt(first)  # a live reconfiguration: the old pipeline's queue goes first
    assert _on_disk(path) == {"db-b", "web-w", "db-c"}
    assert turns.end() == 3  # the old pipeline's two writes put off find nothing left
    assert _on_disk(path) == {"db-b", "web-w", "db-c"}
    second.stop(db, c)
    second.close()
    assert _on_disk(path) == {"db-b", "web-w"}, "a close writes the queue"
    assert turns.end() == 1
    assert _on_disk(path) == {"db-b", "web-w"}


def _step(
    p: TopologyAwarePolicy,
    s: TopologyAwareState,
    op: Op,
    live: dict[ContainerID, ContainerInfo],
) -> tuple[TopologyAwareState, dict[ContainerID, Assignment], ContainerID | None] | None:
    """One decision of the history: (state, assignments it changed, id released)."""
    c = make(op)
    if op.create and c.id not in live:
        try:
            d = p.allocate(s, c)
        except AllocationError:
            return None
        live[c.id] = c
    elif not op.create and c.id in live:
        d = p.release(s, live.pop(c.id).id)
    else:
        return None
    assert isinstance(d.state, TopologyAwareState)
    changed = {u.container_id: u for u in d.updates}
    if d.assignment is not None:
        changed[c.id] = d.assignment
    return d.state, changed, None if op.create else c.id


@pytest.mark.parametrize("name", list(SYNTHETIC))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, cut=st.integers(0, 25))
def test_a_turn_lost_to_a_kill_never_restarts_into_a_wrong_placement(
    tmp_path_factory: pytest.TempPathFactory, name: str, ops: list[Op], cut: int
) -> None:
    path = tmp_path_factory.mktemp("records") / RECORD_FILE
    p = TopologyAwarePolicy(topology=topo(**SYNTHETIC[name]), config={})
    turns = Turns()
    store = RecordStore(path, scope="ta", log=QUIET, defer=turns)
    s = p.initial_state()
    live: dict[ContainerID, ContainerInfo] = {}
    assignments: dict[ContainerID, Assignment] = {}
    for n, op in enumerate(ops):
        if n == cut:
            turns.end()  # the last turn written; every later one is lost to the kill
        stepped = _step(p, s, op, live)
        if stepped is None:
            continue
        s, changed, gone = stepped
        assignments.update(changed)
        if gone is not None:
            assignments.pop(gone, None)
        store.keep(p, s, assignments, changed=list(changed), full=False, gone=gone)
    if cut >= len(ops):
        turns.end()
    # the runtime applied every decision answered; the restart reads the file as left
    rendered = p.render(s)
    reports = [with_current(c, rendered[c.id].cpus, rendered[c.id].mems) for c in live.values()]
    records = RecordStore(path, scope="ta", log=QUIET).load()
    d = restart(p, reports, records)
    p.check(d.state)
    assert restart_violations(p, reports, d) == [], d.reason
    believed = p.render(d.state)
    for c in applied(reports, d):
        assert c.id in believed, (c.id, d.reason)
        assert not differs_from_current(c, believed[c.id]), (c.id, believed[c.id], d.reason)
