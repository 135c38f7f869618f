"""CPU priority, ``require-isolated-cpus`` and ``hide-hyperthreads`` in topology-aware.

Machines are nri-plugins' n4c16 in our numbering (2 packages x 2 NUMA nodes x 2 cores x
2 threads: node0 = 0-1,8-9, node1 = 2-3,10-11, node2 = 4-5,12-13, node3 = 6-7,14-15;
CPU n and n+8 are siblings; CPU 0 reserved by the default 750m), with E-cores or
isolated CPUs marked.  Their cpu04/cpu05 (one core of node1) is our core 2,10; their
cpu00/cpu01 (a core of node0) is our 0,8.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nri_resmgr.model import (
    AllocationError,
    AnnotationError,
    ConfigError,
    ContainerID,
    ContainerInfo,
    CPUKind,
    QoSClass,
)
from nri_resmgr.policy.topology_aware import TopologyAwarePolicy, TopologyAwareState
from nri_resmgr.policy.topology_aware.preferences import (
    HIDE_HYPERTHREADS,
    PREFER_ISOLATED,
    PREFER_RESERVED,
    REQUIRE_ISOLATED,
    container_request,
)
from nri_resmgr.policy.topology_aware.priority import (
    PREFER_CPU_PRIORITY,
    CPUPriority,
    priority_cpus,
)
from nri_resmgr.policy.topology_aware.reports import claim_of
from nri_resmgr.topology.cpuset import CPUSet, IDSet
from nri_resmgr.topology.model import Topology
from nri_resmgr.topology.synthetic import build_topology
from tests.support.builders import ctr, small, with_current

N4C16 = {"packages": 2, "nodes": 2, "cores": 2, "threads": 2, "memory": "2G"}


def machine(**extra: str) -> Topology:
    return build_topology({**N4C16, **extra})


def place(
    topology: Topology, containers: list[ContainerInfo], config: Mapping[str, Any] | None = None
) -> tuple[TopologyAwarePolicy, TopologyAwareState, dict[str, CPUSet]]:
    p = TopologyAwarePolicy(topology=topology, config=config or {})
    s = p.initial_state()
    got: dict[str, CPUSet] = {}
    for c in containers:
        d = p.allocate(s, c)
        s = d.state
        p.check(s)
        assert d.assignment is not None
        got[c.name] = d.assignment.cpus
    return p, s, got


def prio(name: str, value: str, *, pod: str = "p") -> dict[str, str]:
    return {f"{PREFER_CPU_PRIORITY}/container.{name}": value}


# ---- CPU priority ----------------------------------------------------------------------


def test_priority_classes_of_a_hybrid_and_a_plain_machine() -> None:
    hybrid = priority_cpus(machine(efficient_cpus="2,10"))
    assert (hybrid.low, hybrid.hybrid) == (IDSet([2, 10]), True)
    assert hybrid.high == hybrid.normal == machine().online_cpus() - IDSet([2, 10])
    plain = priority_cpus(small())
    # no core types and no frequency data in our model: all normal, nothing high or low
    assert (plain.high, plain.low, plain.normal) == (IDSet(), IDSet(), small().online_cpus())


def test_cpuprio_low_takes_e_cores_normal_avoids_them() -> None:
    """n4c16/test08-cpuprio-allocation, first half (E-cores = their cpu04-05)."""
    t = machine(efficient_cpus="2,10")
    ann = {**prio("c0", "low"), **prio("c2", "low")}
    _, _, got = place(t, [ctr(n, milli=1000, ann=ann) for n in ("c0", "c1", "c2")])
    assert got["c0"] == IDSet([2])  # their cpu04
    assert got["c1"] not in (IDSet([2]), IDSet([10]))
    assert got["c2"] == IDSet([10])  # their cpu05


def test_cpuprio_high_takes_p_cores() -> None:
    """n4c16/test08-cpuprio-allocation, second half (P-cores = their cpu00-01,04-05)."""
    t = machine(efficient_cpus="1,3-7,9,11-15")  # P-cores: 0,8 and 2,10
    ann = {f"{PREFER_CPU_PRIORITY}/pod": "low", **prio("c0", "high"), **prio("c2", "high")}
    # as in their script, the second ANN0= replaces the pod-wide "low": c1 is unannotated
    del ann[f"{PREFER_CPU_PRIORITY}/pod"]
    _, _, got = place(t, [ctr(n, milli=1000, ann=ann) for n in ("c0", "c1", "c2")])
    high = (IDSet([8]), IDSet([2]), IDSet([10]))  # their cpu01, cpu04, cpu05
    assert got["c0"] in high
    assert got["c1"] not in high
    assert got["c2"] in high
    # the order their comment gives: cpu04 first, then cpu01
    assert (got["c0"], got["c2"]) == (IDSet([2]), IDSet([8]))


def test_priority_counts_before_depth_and_normal_after() -> None:
    """A low request takes the E-core node over a deeper-equal roomier one; normal does not."""
    t = machine(efficient_cpus="4-5,12-13")  # node2 is all E-cores
    _, _, low = place(t, [ctr("a", milli=2000, ann=prio("a", "low"))])
    assert low["a"] <= IDSet([4, 5, 12, 13])
    _, _, normal = place(t, [ctr("a", milli=2000, ann=prio("a", "normal"))])
    assert normal["a"].isdisjoint(IDSet([4, 5, 12, 13]))


def test_priority_without_room_in_its_class_still_places() -> None:
    """Unmet is a preference: the request goes elsewhere rather than failing."""
    t = machine(efficient_cpus="2,10")
    _, _, got = place(t, [ctr("a", milli=4000, ann=prio("a", "low"))])
    assert len(got["a"]) == 4


def test_priority_is_a_no_op_on_a_machine_without_classes() -> None:
    plain = [ctr("a", milli=2000), ctr("b", pod="q", milli=1000)]
    high = [
        ctr("a", milli=2000, ann=prio("a", "high")),
        ctr("b", pod="q", milli=1000, ann=prio("b", "low")),
    ]
    assert place(small(), plain)[2] == place(small(), high)[2]


@pytest.mark.parametrize(
    ("qos", "value", "expect"),
    [
        (QoSClass.GUARANTEED, "high", CPUPriority.HIGH),
        (QoSClass.GUARANTEED, "Low", CPUPriority.LOW),
        (QoSClass.GUARANTEED, "default", CPUPriority.NONE),
        (QoSClass.BURSTABLE, "high", CPUPriority.NONE),  # theirs: Guaranteed only
    ],
    ids=["high", "case-insensitive", "default", "burstable-ignored"],
)
def test_priority_annotation(qos: QoSClass, value: str, expect: CPUPriority) -> None:
    p = TopologyAwarePolicy(topology=small(), config={})
    c = ctr("a", qos=qos, milli=1000, ann={PREFER_CPU_PRIORITY: value})
    assert container_request(c, p.config).cpu_priority is expect


def test_malformed_priority_names_the_accepted_values() -> None:
    p = TopologyAwarePolicy(topology=small(), config={})
    c = ctr("a", milli=1000, ann={PREFER_CPU_PRIORITY: "urgent"})
    with pytest.raises(AnnotationError, match='"urgent"; expected one of high, normal, low'):
        container_request(c, p.config)


# ---- require-isolated-cpus ---------------------------------------------------------------

ISO = {"isolated": "5,13"}  # one core of node2


def test_require_isolated_gets_isolated_cpus() -> None:
    _, s, got = place(machine(**ISO), [ctr("a", milli=2000, ann={REQUIRE_ISOLATED: "true"})])
    assert got["a"] == IDSet([5, 13])
    assert next(iter(s.grants.values())).kind is CPUKind.ISOLATED


def test_require_isolated_fails_with_a_reason_when_none_are_free() -> None:
    with pytest.raises(AllocationError) as err:
        place(small(), [ctr("a", milli=1000, ann={REQUIRE_ISOLATED: "true"})])
    assert "1 isolated CPU" in str(err.value)
    assert "require-isolated-cpus: 0 free isolated CPUs, 1 needed" in str(err.value)


def test_require_isolated_fails_once_the_isolated_cpus_are_taken() -> None:
    ann = {REQUIRE_ISOLATED: "true"}
    p, s, _ = place(machine(**ISO), [ctr("a", milli=2000, ann=ann)])
    with pytest.raises(AllocationError, match="require-isolated-cpus"):
        p.allocate(s, ctr("b", pod="q", milli=1000, ann=ann))


def test_prefer_isolated_still_slices_when_none_are_free() -> None:
    _, _, got = place(small(), [ctr("a", milli=1000, ann={PREFER_ISOLATED: "true"})])
    assert len(got["a"]) == 1


def test_require_isolated_does_not_fall_back_to_shared() -> None:
    c = ctr("a", milli=2000, ann={REQUIRE_ISOLATED: "true"})
    with pytest.raises(AllocationError, match="require-isolated-cpus"):
        place(small(), [c], {"fallbackToShared": True})


@pytest.mark.parametrize(
    ("ann", "strict"),
    [
        ({REQUIRE_ISOLATED: "true"}, True),
        ({REQUIRE_ISOLATED: "false"}, False),
        # same scope: require wins
        ({REQUIRE_ISOLATED: "true", PREFER_ISOLATED: "true"}, True),
        # the narrower scope wins
        ({REQUIRE_ISOLATED: "true", f"{PREFER_ISOLATED}/container.a": "true"}, False),
        ({f"{REQUIRE_ISOLATED}/pod": "true", PREFER_ISOLATED: "false"}, True),
    ],
    ids=["require", "require-false", "tie-require-wins", "narrower-prefer", "narrower-require"],
)
def test_require_and_prefer_compete_by_scope(ann: dict[str, str], strict: bool) -> None:
    p = TopologyAwarePolicy(topology=small(), config={})
    req = container_request(ctr("a", milli=2000, ann=ann), p.config)
    assert req.require_isolated is strict


def test_rebuild_does_not_keep_a_required_container_on_sliced_cpus() -> None:
    p = TopologyAwarePolicy(topology=machine(**ISO), config={})
    c = ctr("a", milli=2000, ann={REQUIRE_ISOLATED: "true"})
    d = p.rebuild([with_current(c, IDSet([2, 10]), None)])
    p.check(d.state)
    assert p.render(d.state)[c.id].cpus == IDSet([5, 13])


# ---- properties --------------------------------------------------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    e_cores=st.sets(st.integers(0, 7), min_size=1, max_size=4),
    priority=st.sampled_from(["high", "low"]),
    full=st.integers(1, 3),
)
def test_a_lone_request_gets_its_class_whenever_one_node_has_room(
    e_cores: set[int], priority: str, full: int
) -> None:
    """On an empty hybrid n4c16, a high/low request of N CPUs gets only CPUs of its class
    whenever a NUMA node has N free shared CPUs of that class.  A core's threads are of
    one kind, as on hybrid parts (the allocator ranks whole cores by their CPUs of the
    class: a core half of each would tie with another)."""
    t = machine(efficient_cpus=str(IDSet(c + thread for c in e_cores for thread in (0, 8))))
    p = TopologyAwarePolicy(topology=t, config={})
    classes = p.priorities.of(CPUPriority(priority))
    c = ctr("a", milli=1000 * full, ann={PREFER_CPU_PRIORITY: priority})
    d = p.allocate(p.initial_state(), c)
    p.check(d.state)
    assert d.assignment is not None
    roomy = any(
        len(pool.sharable & classes) >= full
        for pool in p.tree.pools
        if pool.name.startswith("node")
    )
    if roomy:
        assert d.assignment.cpus <= classes, (d.assignment, classes)


# ---- hide-hyperthreads ---------------------------------------------------------------------


def test_hide_hyperthreads_shows_one_thread_of_the_cpus_granted() -> None:
    """n4c16/test00-basic-placement, pod1 (three of its four 3-CPU containers; c2 hides)."""
    ann = {f"{HIDE_HYPERTHREADS}/container.pod1c2": "true"}
    t = machine()
    p, s, got = place(t, [ctr(f"pod1c{i}", pod="pod1", milli=3000, ann=ann) for i in range(3)])
    assert [len(got[f"pod1c{i}"]) for i in range(3)] == [3, 3, 2]
    assert len(t.cores_of(got["pod1c2"])) == 2
    grant = s.grants[ContainerID("pod1-pod1c2")]
    assert len(grant.exclusive) == 3  # the hidden thread is held, not shared
    nodes = [t.nodes_of(got[f"pod1c{i}"]) for i in range(3)]
    assert all(a.isdisjoint(b) for i, a in enumerate(nodes) for b in nodes[i + 1 :])
    shared = p.render(s)
    assert all(
        grant.exclusive.isdisjoint(a.cpus) for cid, a in shared.items() if cid != grant.container_id
    )


def test_hide_hyperthreads_on_reserved_cpus() -> None:
    """n4c16/test11-reserved-cpu-annotations, pod2: reserved 10-11 (one core) shows 10."""
    t = build_topology({**N4C16, "threads": 2})
    # their cpu10/cpu11 are one core; ours are 5 and 13
    config = {
        "availableResources": {"cpu": "cpuset:4-5,12-13"},
        "reservedResources": {"cpu": "cpuset:5,13"},
    }
    ann = {f"{PREFER_RESERVED}/pod": "true", f"{HIDE_HYPERTHREADS}/pod": "true"}
    _, _, got = place(t, [ctr("c0", pod="pod2", milli=100, ann=ann)], config)
    assert got["c0"] == IDSet([5])


def test_rebuild_keeps_a_hide_hyperthreads_grant_from_its_report() -> None:
    """Its report shows 2 of the 3 CPUs held: the rebuild finds the hidden one, not the
    thread a shared container sees, and moves nobody."""
    ann = {HIDE_HYPERTHREADS: "true"}
    p, s, _ = place(
        machine(),
        [
            ctr("h", pod="h", milli=3000, ann=ann),
            ctr("s", pod="s", qos=QoSClass.BURSTABLE, milli=100),
        ],
    )
    r = p.render(s)
    reports = [
        with_current(
            ctr("h", pod="h", milli=3000, ann=ann),
            r[ContainerID("h-h")].cpus,
            r[ContainerID("h-h")].mems,
        ),
        with_current(
            ctr("s", pod="s", qos=QoSClass.BURSTABLE, milli=100),
            r[ContainerID("s-s")].cpus,
            r[ContainerID("s-s")].mems,
        ),
    ]
    d = p.rebuild(reports)
    p.check(d.state)
    assert d.state.grants[ContainerID("h-h")].exclusive == s.grants[ContainerID("h-h")].exclusive
    assert d.updates == (), d.reason


def test_a_hide_hyperthreads_claim_takes_hidden_threads_nobody_sees() -> None:
    p = TopologyAwarePolicy(topology=machine(), config={})
    c = with_current(ctr("h", milli=3000, ann={HIDE_HYPERTHREADS: "true"}), IDSet([2, 3]), None)
    req = container_request(c, p.config)
    assert claim_of(p.tree, p.topology, c, req) == IDSet([2, 3, 10])
    # a shared container's cpuset shows 10: the hidden thread is 11
    assert claim_of(p.tree, p.topology, c, req, holders={10: 1}) == IDSet([2, 3, 11])
    # too few hidden threads (or more shown cores than CPUs) is no claim
    two = with_current(c, IDSet([2, 3, 4, 5]), None)
    assert claim_of(p.tree, p.topology, two, req) is None


def test_rebuild_of_a_mixed_hide_hyperthreads_container_moves_nobody_the_second_time() -> None:
    """Its report shows threads of many cores; a hidden sibling another container's
    cpuset holds is not its own, so the second rebuild keeps the other one where it is
    (found by test_rebuild_from_arbitrary_cpusets_is_valid[pmem-hbm])."""
    t = build_topology(
        {"packages": 1, "nodes": 2, "cores": 3, "threads": 2, "memory": "2G",
         "extra_memory_nodes": [{"kind": "pmem", "memory": "8G", "attach": 0},
                                {"kind": "hbm", "memory": "1G", "attach": 1}]}
    )  # fmt: skip
    p = TopologyAwarePolicy(topology=t, config={})
    c0 = with_current(ctr("c0", pod="pod0", cid="c0"), IDSet(), None)
    c1 = ctr("c1", pod="pod1", milli=1500, ann={HIDE_HYPERTHREADS: "true"}, cid="c1")
    d = p.rebuild([c0, with_current(c1, IDSet([0, 1, 2, 3]), None)])
    r = p.render(d.state)
    again = p.rebuild([with_current(c, r[c.id].cpus, r[c.id].mems) for c in (c0, c1)])
    p.check(again.state)
    assert again.updates == (), again.reason


@pytest.mark.parametrize(
    ("qos", "ann", "expect"),
    [
        (QoSClass.GUARANTEED, {}, CPUPriority.LOW),
        (QoSClass.BURSTABLE, {}, CPUPriority.LOW),
        (QoSClass.GUARANTEED, {PREFER_CPU_PRIORITY: "default"}, CPUPriority.LOW),
        (QoSClass.GUARANTEED, {PREFER_CPU_PRIORITY: "high"}, CPUPriority.HIGH),
    ],
    ids=["guaranteed", "burstable", "annotated-default", "annotated-high"],
)
def test_default_cpu_priority_from_the_configuration(
    qos: QoSClass, ann: dict[str, str], expect: CPUPriority
) -> None:
    """nri-plugins' ``defaultCPUPriority``: every container not annotated otherwise."""
    p = TopologyAwarePolicy(topology=small(), config={"defaultCPUPriority": "low"})
    c = ctr("a", qos=qos, milli=1000, ann=ann)
    assert container_request(c, p.config).cpu_priority is expect


def test_default_cpu_priority_must_be_a_known_class() -> None:
    with pytest.raises(ConfigError, match="defaultCPUPriority"):
        TopologyAwarePolicy(topology=small(), config={"defaultCPUPriority": "urgent"})
