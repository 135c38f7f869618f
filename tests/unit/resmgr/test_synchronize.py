"""Synchronize repair: every running container of the runtime's report accounted for,
each pod read once, and the work linear in the containers."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import pytest

from nri_api import api
from nri_resmgr.model import (
    AnnotationError,
    ContainerID,
    ContainerInfo,
    ContainerKind,
    CPUKind,
    Decision,
    Pod,
)
from nri_resmgr.runtime import adapter
from nri_resmgr.runtime.decision_log import DecisionLog
from nri_resmgr.runtime.pipeline import Pipeline
from nri_resmgr.runtime.synchronize import read_runtime_view
from nri_resmgr.topology.cpuset import CPUSet
from tests.support.logs import QUIET, CapturedLog
from tests.support.pipeline import (
    CountingPolicy,
    CountState,
    container,
    sandbox,
    static_pipeline,
)


def test_synchronize_skips_stopped_and_orphans_and_bad_input() -> None:
    policy = CountingPolicy()
    p = Pipeline(policy, log=QUIET)
    s = sandbox()
    bad = container(s, "bad")
    bad.ClearField("linux")
    orphan = container(sandbox("gone"), "x")
    stopped = container(s, "old", state=api.ContainerState.CONTAINER_STOPPED)
    good = container(s, "good", cpus="3")
    assert p.synchronize([s], [bad, orphan, stopped, good]) == []
    assert policy.calls == [("rebuild", "p0-good")]
    assert list(p.containers) == ["p0-good"]
    assert p.assignments[ContainerID("p0-good")].cpus == CPUSet([3])


def test_static_synchronize_keeps_valid_and_moves_conflicting() -> None:
    p = static_pipeline()
    db = sandbox("db")
    a = container(db, "a", cpu="2", limit="2", cpus="2,6")
    b = container(db, "b", cpu="2", limit="2", cpus="2,6")
    updates = p.synchronize([db], [a, b])
    assert [u.container_id for u in updates] == ["db-b"]
    got = {cid: asg.cpus for cid, asg in p.assignments.items()}
    assert got[ContainerID("db-a")] == CPUSet.parse("2,6")
    assert got[ContainerID("db-a")].isdisjoint(got[ContainerID("db-b")])
    assert p.assignments[ContainerID("db-b")].kind is CPUKind.EXCLUSIVE


class MovingPolicy(CountingPolicy):
    """Its rebuild moves every other container (CPU 100 + position) and keeps the rest."""

    def rebuild(self, containers: Sequence[ContainerInfo]) -> Decision:
        moved = tuple(self._a(c.id, 100 + i) for i, c in enumerate(containers) if i % 2 == 0)
        return Decision(CountState({c.id: i for i, c in enumerate(containers)}), updates=moved)


#: the files of a Synchronize's own work: the event, reading the report, the decision lines
_SYNCHRONIZE_FILES = frozenset(
    f.__code__.co_filename for f in (Pipeline.synchronize, read_runtime_view, DecisionLog.decision)
)


def _synchronize_calls(n: int) -> tuple[int, list[dict[str, Any]]]:
    """Python calls inside the pipeline, synchronize and decision-log modules during a
    Synchronize of `n` containers (a count, not a time), and the decision lines logged."""
    captured = CapturedLog()
    p = Pipeline(MovingPolicy(), log=captured.log)
    pods = [sandbox(f"p{i}") for i in range(n)]
    ctrs = [container(pod, "c") for pod in pods]
    calls = 0

    def count(frame: Any, event: str, _arg: Any) -> None:
        nonlocal calls
        if event == "call" and frame.f_code.co_filename in _SYNCHRONIZE_FILES:
            calls += 1

    sys.setprofile(count)
    try:
        p.synchronize(pods, ctrs)
    finally:
        sys.setprofile(None)
    return calls, captured.lines


def test_synchronize_work_is_linear_in_the_containers() -> None:
    """Telling movers from kept containers was a scan of the movers per container:
    O(n^2), 2.5 s of a 10,000-container Synchronize (bench.scale)."""
    small, lines = _synchronize_calls(100)
    large, _ = _synchronize_calls(400)
    assert large < 5 * small, (small, large)  # quadratic: ~16x
    reasons = {line["container"]: line["reason"] for line in lines if "container" in line}
    assert reasons["ns/p0/c"].startswith("moved") and reasons["ns/p1/c"] == "kept"
    assert sum(r.startswith("moved") for r in reasons.values()) == 50


def test_synchronize_reads_each_pod_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pods of the Synchronize are parsed once, not again for each container."""
    parsed: list[str] = []
    real = adapter.pod_from_nri

    def counting(sandbox: api.PodSandbox, **kw: Any) -> Pod:
        parsed.append(sandbox.id)
        return real(sandbox, **kw)

    monkeypatch.setattr(adapter, "pod_from_nri", counting)
    p = Pipeline(CountingPolicy(), log=QUIET)
    pods = [sandbox(f"p{i}") for i in range(3)]
    p.synchronize(pods, [container(pod, n) for pod in pods for n in ("a", "b")])
    assert sorted(parsed) == ["sb-p0", "sb-p1", "sb-p2"]
    assert len(p.containers) == 6
    assert {c.pod.id for c in p.containers.values()} == {"sb-p0", "sb-p1", "sb-p2"}


def test_synchronize_accounts_for_containers_with_garbage_pod_annotations() -> None:
    p = static_pipeline()
    db = sandbox("db", annotations={"noderesource.dev/resources": "{not json"})
    a = container(db, "a", cpu="2", limit="2", cpus="1,5")
    with pytest.raises(AnnotationError):
        p.create(db, container(db, "new", cpu="2", limit="2"))
    assert p.synchronize([db], [a]) == []
    assert p.assignments[ContainerID("db-a")].cpus == CPUSet.parse("1,5")
    assert p.containers[ContainerID("db-a")].kind is ContainerKind.APP


def test_a_container_listed_twice_counts_once_and_the_first_is_kept() -> None:
    policy = CountingPolicy()
    p = Pipeline(policy, log=QUIET)
    s = sandbox()
    first, again = container(s, "a", cpus="3"), container(s, "a", cpus="5")
    assert p.synchronize([s], [first, again]) == []
    assert policy.calls == [("rebuild", "p0-a")]
    assert p.assignments[ContainerID("p0-a")].cpus == CPUSet([3])
