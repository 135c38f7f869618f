"""The static policy: kubelet static CPU manager semantics on exact cpusets."""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nri_resmgr.model import (
    AllocationError,
    Assignment,
    ConfigError,
    ContainerID,
    ContainerInfo,
    CPUKind,
    QoSClass,
)
from nri_resmgr.policy.static import StaticPolicy, StaticState
from nri_resmgr.topology.cpuset import IDSet, union
from nri_resmgr.topology.model import Topology
from tests.support.builders import (
    ctr,
    small,
    snapshot,
    snapshot_names,
    topo,
    with_current,
)
from tests.support.requirements import require_topologies

BE = QoSClass.BEST_EFFORT
BU = QoSClass.BURSTABLE


def run(
    config: Mapping[str, Any], containers: list[ContainerInfo]
) -> tuple[StaticPolicy, StaticState, dict[str, str]]:
    p = StaticPolicy(topology=small(), config=config)
    s = p.initial_state()
    got = {}
    for c in containers:
        d = p.allocate(s, c)
        assert isinstance(d.state, StaticState)
        s = d.state
        assert d.assignment is not None
        got[c.name] = str(d.assignment.cpus)
    return p, s, got


CASES = [
    pytest.param({}, [ctr("a", qos=BE)], {"a": "0-15"}, id="best-effort-gets-everything"),
    pytest.param(
        {"reservedResources": {"cpu": "750m"}},
        [ctr("a", milli=2000), ctr("b", milli=4000), ctr("c", milli=1000)],
        {"a": "1,9", "b": "2-3,10-11", "c": "8"},
        id="quantity-reserves-cpu0-and-packs",
    ),
    pytest.param(
        {"reservedSystemCPUs": "0,8"},
        [ctr("a", milli=8000), ctr("b", qos=BU, milli=500)],
        {"a": "4-7,12-15", "b": "0-3,8-11"},
        id="whole-package-first-then-shared-includes-reserved",
    ),
    pytest.param(
        {"reservedSystemCPUs": "0,8", "options": {"strict-cpu-reservation": True}},
        [ctr("a", qos=BU, milli=500)],
        {"a": "1-7,9-15"},
        id="strict-reservation-keeps-shared-off-reserved",
    ),
    pytest.param(
        {},
        [ctr("a", milli=1500), ctr("b", milli=500)],
        {"a": "0-15", "b": "0-15"},
        id="fractional-guaranteed-is-shared",
    ),
    pytest.param(
        {"reservedSystemCPUs": "0"},
        [ctr("a", milli=3000)],
        {"a": "1,8-9"},
        id="three-cpus-whole-core-then-broken-core",
    ),
    pytest.param(
        {"reservedSystemCPUs": "0", "options": {"full-pcpus-only": True}},
        [ctr("a", milli=2000)],
        {"a": "1,9"},
        id="full-pcpus-whole-core",
    ),
]


@pytest.mark.parametrize(("config", "containers", "expected"), CASES)
def test_allocations(
    config: Mapping[str, Any], containers: list[ContainerInfo], expected: dict[str, str]
) -> None:
    _, _, got = run(config, containers)
    assert got == expected


def test_shrinking_shared_pool_updates_every_shared_container() -> None:
    p = StaticPolicy(topology=small(), config={"reservedSystemCPUs": "0"})
    s = p.initial_state()
    for c in [ctr("a", qos=BE), ctr("b", pod="q", qos=BU, milli=100)]:
        d0 = p.allocate(s, c)
        assert isinstance(d0.state, StaticState)
        s = d0.state
    d = p.allocate(s, ctr("x", pod="g", milli=2000))
    assert d.assignment is not None and d.assignment.kind is CPUKind.EXCLUSIVE
    assert [(u.container_id, str(u.cpus)) for u in d.updates] == [
        ("p-a", "0,2-8,10-15"),
        ("q-b", "0,2-8,10-15"),
    ]
    r = p.release(d.state, d.assignment.container_id)
    assert [str(u.cpus) for u in r.updates] == ["0-15", "0-15"]
    assert r.state == s


@pytest.mark.parametrize(
    ("config", "request_milli", "message"),
    [
        pytest.param(
            {"reservedSystemCPUs": "0", "options": {"full-pcpus-only": True}},
            3000,
            "pod default/p container x: requested 3 exclusive CPUs; expected a multiple of 2 "
            "threads per core (full-pcpus-only); free CPUs: 1-15",
            id="full-pcpus-odd",
        ),
        pytest.param(
            {"reservedSystemCPUs": "0-1"},
            15000,
            "pod default/p container x: requested 15 exclusive CPUs; only 14 free CPUs "
            "available (2-15)",
            id="too-many",
        ),
        pytest.param(
            {"options": {"strict-cpu-reservation": True}},
            16000,
            "pod default/p container x: requested 16 exclusive CPUs; taking 0-15 would leave "
            "the shared pool empty; expected at least one shared CPU to remain",
            id="would-empty-shared",
        ),
    ],
)
def test_allocation_errors(config: Mapping[str, Any], request_milli: int, message: str) -> None:
    p = StaticPolicy(topology=small(), config=config)
    with pytest.raises(AllocationError) as exc:
        p.allocate(p.initial_state(), ctr("x", milli=request_milli))
    assert str(exc.value) == message


@pytest.mark.parametrize(
    ("config", "fragment"),
    [
        pytest.param(
            {"reservedSystemCPUs": "0", "reservedResources": {"cpu": "1"}},
            "both reservedSystemCPUs and reservedResources.cpu",
            id="both",
        ),
        pytest.param({"reservedSystemCPUs": "0,99"}, "not online", id="offline"),
        pytest.param(
            {"reservedResources": {"cpu": "lots"}},
            "reservedResources.cpu: 'lots' is not a CPU quantity",
            id="bad-quantity",
        ),
        pytest.param({"options": {"bogus": True}}, "bogus", id="unknown-option"),
        pytest.param({"reservedSystemCPUs": "0-15"}, "all online CPUs", id="all-reserved"),
    ],
)
def test_config_errors(config: Mapping[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigError, match="policy static") as exc:
        StaticPolicy(topology=small(), config=config)
    assert fragment in str(exc.value)


def test_pin_memory_uses_nodes_of_cpus() -> None:
    _, _, _ = run({}, [])
    p = StaticPolicy(topology=small(), config={"reservedSystemCPUs": "0", "pinMemory": True})
    d = p.allocate(p.initial_state(), ctr("a", milli=4000))
    assert d.assignment is not None
    assert (str(d.assignment.cpus), str(d.assignment.mems)) == ("2-3,10-11", "1")


def test_update_same_size_keeps_cpus_and_resize_moves() -> None:
    p = StaticPolicy(topology=small(), config={"reservedSystemCPUs": "0"})
    s = p.allocate(p.initial_state(), ctr("a", milli=2000)).state
    same = p.update(s, ctr("a", milli=2000))
    assert same.updates == () and same.assignment is not None
    assert str(same.assignment.cpus) == "1,9"
    grown = p.update(s, ctr("a", milli=4000))
    assert grown.assignment is not None and len(grown.assignment.cpus) == 4


def test_a_decision_writes_nothing_into_the_state_it_is_given() -> None:
    """The union of exclusive CPUs is built with a state, not filled in behind it."""
    p = StaticPolicy(topology=small(), config={})
    s = p.initial_state()
    frozen = pickle.dumps(s)
    p.allocate(s, ctr("b", pod="b", qos=QoSClass.BURSTABLE, milli=500))
    p.allocate(s, ctr("c", pod="c", milli=1000))
    assert pickle.dumps(s) == frozen
    s = p.release(p.allocate(s, ctr("a", pod="a", milli=2000)).state, ContainerID("a-a")).state
    frozen = pickle.dumps(s)
    p.allocate(s, ctr("c", pod="c", milli=1000))
    assert pickle.dumps(s) == frozen
    assert s.exclusive_cpus() == IDSet()


def test_rebuild_keeps_valid_and_repicks_overlapping() -> None:
    p = StaticPolicy(topology=small(), config={"reservedSystemCPUs": "0"})
    containers = [
        ctr("a", milli=2000, cur="4,12"),
        ctr("b", milli=2000, cur="4,13"),  # overlaps a: re-picked
        ctr("c", milli=2000, cur="0,8"),  # reserved CPU: re-picked
        ctr("s", pod="q", qos=BE, cur="0-15"),
    ]
    d = p.rebuild(containers)
    assert isinstance(d.state, StaticState)
    got = {str(cid): str(e.exclusive) for cid, e in d.state.entries.items()}
    assert got["p-a"] == "4,12"
    assert got["p-b"] != "4,13" and not IDSet.parse(got["p-b"]) & IDSet.parse("0,4,12")
    assert {u.container_id for u in d.updates} == {"p-b", "p-c", "q-s"}


def test_rebuild_falls_back_to_shared_when_out_of_cpus() -> None:
    p = StaticPolicy(topology=small(), config={"reservedSystemCPUs": "0"})
    d = p.rebuild([ctr("a", milli=14000, cur="1-7,9-15"), ctr("b", milli=2000, cur="1,9")])
    assert isinstance(d.state, StaticState)
    # both claims are valid alone and overlap: the smaller one keeps its CPUs
    # (common.order_claims), and the big one no longer fits
    assert str(d.state.entries[ContainerID("p-b")].exclusive) == "1,9"
    assert not d.state.entries[ContainerID("p-a")].exclusive
    assert "fell back to shared: pod default/p container a" in d.reason


# ---- properties ---------------------------------------------------------------------------

OPS = st.lists(
    st.tuples(
        st.booleans(),  # create (True) or delete
        st.integers(0, 7),  # container slot
        st.sampled_from([0, 500, 1000, 2000, 3000, 4000]),
        st.sampled_from(list(QoSClass)),
    ),
    max_size=30,
)


def check(p: StaticPolicy, s: StaticState) -> None:
    seen: set[int] = set()
    for e in s.entries.values():
        assert not (seen & e.exclusive.ids()), "CPU exclusive twice"
        assert e.exclusive.isdisjoint(p.reserved)
        seen |= e.exclusive.ids()
    for a in p.render(s).values():
        assert a.cpus and a.cpus <= p.topology.online_cpus()


SPECS = {
    "2s2n2c2t": {"packages": 2, "nodes": 2, "cores": 2, "threads": 2},
    "1s1n6c1t": {"packages": 1, "nodes": 1, "cores": 6, "threads": 1},
    "1s2n3c2t": {"packages": 1, "nodes": 2, "cores": 3, "threads": 2},
}


@pytest.mark.parametrize("name", list(SPECS))
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, full=st.booleans())
def test_random_sequences_keep_invariants(
    name: str, ops: list[tuple[bool, int, int, QoSClass]], full: bool
) -> None:
    exercise(topo(**SPECS[name]), ops, full)


@pytest.mark.parametrize("name", snapshot_names() or ["(no snapshots)"])
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, full=st.booleans())
def test_real_machine_sequences(
    name: str, ops: list[tuple[bool, int, int, QoSClass]], full: bool
) -> None:
    require_topologies()
    exercise(snapshot(name), ops, full)


def exercise(topology: Topology, ops: list[tuple[bool, int, int, QoSClass]], full: bool) -> None:
    p = StaticPolicy(
        topology=topology,
        config={"reservedResources": {"cpu": "1"}, "options": {"full-pcpus-only": full}},
    )
    s = p.initial_state()
    live: dict[str, ContainerInfo] = {}
    for create, slot, milli, qos in ops:
        name = f"c{slot}"
        if create and name not in live:
            c = ctr(name, pod=name, qos=qos, milli=milli)
            try:
                d = p.allocate(s, c)
            except AllocationError:
                continue
            live[name] = c
        elif not create and name in live:
            d = p.release(s, live.pop(name).id)
        else:
            continue
        assert isinstance(d.state, StaticState)
        before = p.render(s)
        s = d.state
        check(p, s)
        # every container whose rendering changed is reported (and no other)
        after = p.render(s)
        changed = {cid for cid in before.keys() & after.keys() if before[cid] != after[cid]}
        assert {u.container_id for u in d.updates} == changed
    # rebuild from the rendered state changes nothing
    rendered = p.render(s)
    again = p.rebuild([with_current(c, rendered[c.id].cpus, None) for c in live.values()])
    assert again.updates == ()
    assert again.state == s
    for c in list(live.values()):
        s = p.release(s, c.id).state
    assert s == p.initial_state()


# ---- the shortcut against the plain computation ------------------------------------------


class PlainStatic(StaticPolicy):
    """Decisions found by rendering every container before and after (the test oracle)."""

    def _render_changed(
        self, old: StaticState, new: StaticState, cid: ContainerID
    ) -> tuple[dict[ContainerID, Assignment], dict[ContainerID, Assignment]]:
        return self.render(old), self.render(new)


@pytest.mark.parametrize("name", list(SPECS))
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, full=st.booleans(), strict=st.booleans(), pin=st.booleans())
def test_decisions_equal_the_render_everything_diff(
    name: str, ops: list[tuple[bool, int, int, QoSClass]], full: bool, strict: bool, pin: bool
) -> None:
    """Only the subject and (when the shared pool changed) the shared containers are
    rendered; the decisions are those of rendering everyone before and after."""
    config: dict[str, Any] = {
        "reservedResources": {"cpu": "1"},
        "options": {"full-pcpus-only": full, "strict-cpu-reservation": strict},
        "pinMemory": pin,
    }
    t = topo(**SPECS[name])
    fast, plain = StaticPolicy(topology=t, config=config), PlainStatic(topology=t, config=config)
    s = fast.initial_state()
    live: dict[str, ContainerInfo] = {}
    for create, slot, milli, qos in ops:
        name = f"c{slot}"
        c = ctr(name, pod=name, qos=qos, milli=milli)
        if create:  # creating a live slot again is an update with the new request
            try:
                d = fast.allocate(s, c)
            except AllocationError as exc:
                with pytest.raises(AllocationError) as caught:
                    plain.allocate(s, c)
                assert str(caught.value) == str(exc)
                continue
            e = plain.allocate(s, c)
            live[name] = c
        elif name in live:
            d = fast.release(s, live[name].id)
            e = plain.release(s, live.pop(name).id)
        else:
            continue
        assert (d.assignment, d.updates, d.reason) == (e.assignment, e.updates, e.reason)
        assert d.state == e.state
        s = d.state
        assert isinstance(s, StaticState)
        assert s.exclusive_cpus() == union(x.exclusive for x in s.entries.values())
