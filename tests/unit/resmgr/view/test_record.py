"""The daemon's decision record (`view.record`): one note per container, bounded."""

from __future__ import annotations

from nri_resmgr.model import Assignment, ContainerID, CPUKind, Decision, PolicyState
from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.view.record import MAX_REASON, MAX_UPDATED, DecisionRecord
from tests.unit.resmgr.view.support import container_info


def decision(cid: str, *, reason: str = "why", updates: int = 0) -> Decision:
    def a(c: str) -> Assignment:
        return Assignment(ContainerID(c), IDSet({1}), IDSet({0}), CPUKind.EXCLUSIVE, "p")

    return Decision(PolicyState(), a(cid), tuple(a(f"u{i}") for i in range(updates)), reason)


def test_the_last_decision_per_container_is_kept_the_oldest_dropped() -> None:
    record = DecisionRecord(max_containers=3, clock=lambda: 7.0)
    for cid in ("a", "b", "c", "a", "d"):
        record.note("create", container_info(cid), decision(cid, reason=f"for {cid}"))
    # a was noted again (the newest), so b, the oldest, made room for d
    assert len(record) == 3
    assert record.get(ContainerID("b")) is None
    note = record.get(ContainerID("a"))
    assert note is not None and (note.event, note.at, note.reason) == ("create", 7.0, "for a")
    assert (note.kind, note.pool, note.cpus, note.mems) == ("exclusive", "p", "1", "0")


def test_a_note_is_bounded_whatever_the_decision() -> None:
    record = DecisionRecord()
    record.note("update", container_info("x"), decision("x", reason="r" * 5000, updates=100))
    note = record.get(ContainerID("x"))
    assert note is not None
    assert note.reason == "r" * MAX_REASON + f"... ({5000 - MAX_REASON} more)"
    assert note.updates == 100 and len(note.updated) == MAX_UPDATED


def test_only_live_containers_are_served() -> None:
    record = DecisionRecord()
    gone, live = container_info("gone"), container_info("live", pod="web", name="app")
    record.note("create", gone, decision("gone"))
    doc = record.as_dict({ContainerID("live"): live})
    assert doc["kept"] == 1
    assert doc["containers"] == [
        {"id": "live", "namespace": "default", "pod": "web", "name": "app", "decision": None}
    ]


def test_notes_of_equal_placements_share_their_text() -> None:
    """The CPUs, memory nodes, kind and reason of two notes of the same placement are one
    string each (`sys.intern`: a pool's shared containers hold one copy)."""
    record = DecisionRecord()
    for cid in ("a", "b"):
        record.note("create", container_info(cid), decision(cid, reason="".join(["sh", "ared"])))
    a, b = record.get(ContainerID("a")), record.get(ContainerID("b"))
    assert a is not None and b is not None
    assert (a.cpus, a.mems, a.kind, a.reason) == ("1", "0", "exclusive", "shared")
    assert a.cpus is b.cpus and a.mems is b.mems and a.kind is b.kind and a.reason is b.reason
