"""The wire edge outbound: an `Assignment` as the adjustment and the updates the runtime
applies; one rendering per placement."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from nri_api.builders import Adjustment, Update
from nri_resmgr.model import Assignment, ContainerID, CPUKind
from nri_resmgr.runtime import adjustments
from nri_resmgr.topology.cpuset import CPUSet


def _assignment(kind: CPUKind, cpus: str = "4-5", mems: str = "1", **kw: str | None) -> Assignment:
    return Assignment(
        container_id=ContainerID("c0"), cpus=CPUSet.parse(cpus), mems=CPUSet.parse(mems),
        kind=kind, **kw,  # type: ignore[arg-type]
    )


def test_adjustment_exclusive_with_classes() -> None:
    adj = adjustments.adjustment_for(
        _assignment(CPUKind.EXCLUSIVE, rdt_class="gold", blockio_class="slow")
    )
    res = adj.linux.resources
    assert res.cpu.cpus == "4-5"
    assert res.cpu.mems == "1"
    assert res.HasField("rdt_class") and res.rdt_class.value == "gold"
    assert res.HasField("blockio_class") and res.blockio_class.value == "slow"
    assert not res.cpu.HasField("shares")


def test_adjustment_kind_none_has_no_cpuset() -> None:
    adj = adjustments.adjustment_for(_assignment(CPUKind.NONE, mems=""))
    assert not adj.HasField("linux")
    adj = adjustments.adjustment_for(_assignment(CPUKind.NONE, mems="", blockio_class="slow"))
    assert adj.linux.resources.cpu.cpus == ""
    assert adj.linux.resources.blockio_class.value == "slow"


def test_adjustment_kind_none_keeps_its_memory_nodes() -> None:
    """cpu.preserve in topology-aware: no CPUs, the memory nodes rendered (nri-plugins
    pins them: the differential test found every such container diverging)."""
    adj = adjustments.adjustment_for(_assignment(CPUKind.NONE, mems="0-3"))
    assert (adj.linux.resources.cpu.cpus, adj.linux.resources.cpu.mems) == ("", "0-3")
    u = adjustments.update_for(_assignment(CPUKind.NONE, mems="0-3"))
    assert u is not None and (u.linux.resources.cpu.cpus, u.linux.resources.cpu.mems) == ("", "0-3")


def test_adjustment_empty_mems_not_set() -> None:
    adj = adjustments.adjustment_for(_assignment(CPUKind.SHARED, cpus="0-3", mems=""))
    assert adj.linux.resources.cpu.cpus == "0-3"
    assert adj.linux.resources.cpu.mems == ""


def test_update_for() -> None:
    u = adjustments.update_for(_assignment(CPUKind.SHARED, cpus="0-3,8-11", mems="0"))
    assert u is not None
    assert u.container_id == "c0"
    assert u.linux.resources.cpu.cpus == "0-3,8-11"
    assert u.linux.resources.cpu.mems == "0"
    assert adjustments.update_for(_assignment(CPUKind.NONE, mems="")) is None


@pytest.mark.parametrize(
    "shape",
    [
        {"kind": CPUKind.SHARED},
        {"kind": CPUKind.EXCLUSIVE, "rdt_class": "gold", "blockio_class": "slow"},
        {"kind": CPUKind.SHARED, "mems": ""},
        {"kind": CPUKind.NONE, "blockio_class": "slow"},
    ],
    ids=["shared", "exclusive-classes", "no-mems", "classes-only"],
)
def test_update_for_is_what_the_builder_makes(shape: dict[str, Any]) -> None:
    """Updates of one placement share a rendering; each is still its own message, equal
    to the builder's, with its own container id."""
    a = dataclasses.replace(_assignment(**shape), container_id=ContainerID("a"))
    b = dataclasses.replace(a, container_id=ContainerID("b"))
    expected = adjustments._render(Update("a"), a)[0].build()
    first, second = adjustments.update_for(a), adjustments.update_for(b)
    assert first is not None and second is not None
    assert first == expected
    assert second.container_id == "b" and second.linux == expected.linux
    first.linux.resources.cpu.cpus = "99"  # a caller's change stays in its message
    again = adjustments.update_for(a)
    assert again == expected


def test_update_for_renders_one_placement_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """An exclusive grant sends the same shared set to hundreds of containers: rendered
    once (validating the list form, building the message), then copied."""
    built: list[str] = []

    class CountingUpdate(Update):
        def __init__(self, container_id: str) -> None:
            built.append(container_id)
            super().__init__(container_id)

    monkeypatch.setattr(adjustments, "Update", CountingUpdate)
    adjustments._update_template.cache_clear()  # earlier tests may have rendered this one
    shared = _assignment(CPUKind.SHARED, cpus="1-27,113-139", mems="0")
    ups = [
        adjustments.update_for(dataclasses.replace(shared, container_id=ContainerID(f"c{i}")))
        for i in range(226)
    ]
    assert len(built) == 1
    assert [u.container_id for u in ups if u is not None] == [f"c{i}" for i in range(226)]
    with pytest.raises(ValueError, match="container id: expected a non-empty string"):
        adjustments.update_for(dataclasses.replace(shared, container_id=ContainerID("")))


def test_adjustment_for_renders_one_placement_once_and_hands_out_copies(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """issue 25 (create-1000): every shared creation in a pool gets the same adjustment,
    rendered once; each caller gets its own copy, so a controller's part merged into one
    creation's (the pipeline's `MergeFrom`) never reaches the next."""
    built: list[int] = []

    class CountingAdjustment(Adjustment):
        def __init__(self) -> None:
            built.append(1)
            super().__init__()

    monkeypatch.setattr(adjustments, "Adjustment", CountingAdjustment)
    adjustments._adjustment_template.cache_clear()  # earlier tests may have rendered this one
    shared = _assignment(CPUKind.SHARED, cpus="1-27,113-139", mems="0", rdt_class="gold")
    first = adjustments.adjustment_for(shared)
    first.linux.resources.cpu.shares.value = 2  # as a controller's adjustment merged in
    second = adjustments.adjustment_for(dataclasses.replace(shared, container_id=ContainerID("c1")))
    assert len(built) == 1
    assert not second.linux.resources.cpu.HasField("shares")
    res = second.linux.resources
    assert res.cpu.cpus == "1-27,113-139" and res.rdt_class.value == "gold"
    other = adjustments.adjustment_for(dataclasses.replace(shared, rdt_class="silver"))
    assert len(built) == 2 and other.linux.resources.rdt_class.value == "silver"


def test_cpuset_updates_for_leaves_out_the_classes_and_the_empty_ones() -> None:
    """The updates of other containers carry cpuset and memory only: a running
    container's classes cannot change."""
    gold = dataclasses.replace(
        _assignment(CPUKind.SHARED, cpus="0-3", mems="0", rdt_class="gold", blockio_class="slow"),
        container_id=ContainerID("a"),
    )
    none = dataclasses.replace(_assignment(CPUKind.NONE, mems=""), container_id=ContainerID("b"))
    (u,) = adjustments.cpuset_updates_for([gold, none])
    assert u.container_id == "a" and u.linux.resources.cpu.cpus == "0-3"
    assert not u.linux.resources.HasField("rdt_class")
    assert not u.linux.resources.HasField("blockio_class")


def test_cpuset_updates_for_gives_each_its_own_placement_in_a_run_of_alike() -> None:
    """Consecutive updates of one placement share a template; one whose memory nodes, CPU
    set or kind differ (equal objects or not) gets its own, and an empty id is refused."""
    cpus, mems, node1 = CPUSet.parse("1-27"), CPUSet.parse("0"), CPUSet.parse("1")

    def a(cid: str, **kw: Any) -> Assignment:
        return Assignment(
            container_id=ContainerID(cid),
            **{"cpus": cpus, "mems": mems, "kind": CPUKind.SHARED, **kw},
        )

    ups = adjustments.cpuset_updates_for(
        [
            a("a"),
            a("b"),
            a("c", mems=node1),
            a("f", kind=CPUKind.NONE, mems=node1),
            a("d", cpus=CPUSet.parse("1-27")),
            a("e", cpus=CPUSet.parse("2-3")),
            a("g", kind=CPUKind.NONE, mems=CPUSet()),
            a("h"),
        ]
    )
    got = [(u.container_id, u.linux.resources.cpu.cpus, u.linux.resources.cpu.mems) for u in ups]
    assert got == [
        ("a", "1-27", "0"),
        ("b", "1-27", "0"),
        ("c", "1-27", "1"),
        ("f", "", "1"),
        ("d", "1-27", "0"),
        ("e", "2-3", "0"),
        ("h", "1-27", "0"),
    ]
    assert ups[0] is not ups[1] and ups[0].linux == ups[1].linux
    with pytest.raises(ValueError, match="container id: expected a non-empty string"):
        adjustments.cpuset_updates_for([a("a"), a("")])
