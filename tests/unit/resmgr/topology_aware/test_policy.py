"""The topology-aware policy: exact placements, annotations, errors, config, rebuild.

The main machine (`small()`) is 2 packages x 2 NUMA nodes x 2 cores x 2 threads:
node0 = 0-1,8-9  node1 = 2-3,10-11  node2 = 4-5,12-13  node3 = 6-7,14-15; CPU n and
n+8 are siblings.  With the default ``reservedResources.cpu: 750m`` CPU 0 is reserved.
`MEM` is 1 package x 2 nodes x 2 cores x 2 threads (node0 = 0-1,4-5, node1 = 2-3,6-7)
plus a CPU-less PMEM node 2 attached to node0, and kernel-isolated CPUs 3 and 7.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from nri_resmgr.model import (
    AllocationError,
    AnnotationError,
    Assignment,
    ConfigError,
    ContainerID,
    ContainerInfo,
    ContainerKind,
    CPUKind,
    QoSClass,
)
from nri_resmgr.policy.topology_aware import (
    InvariantError,
    TopologyAwarePolicy,
    TopologyAwareState,
)
from nri_resmgr.policy.topology_aware.invariants import check_addition, invariant_problems
from nri_resmgr.policy.topology_aware.preferences import (
    ALL_MEMORY as ALL,
)
from nri_resmgr.policy.topology_aware.preferences import (
    CPU_PRESERVE,
    HIDE_HYPERTHREADS,
    MEMORY_PRESERVE,
    MEMORY_TYPE,
    PREFER_ISOLATED,
    PREFER_RESERVED,
    PREFER_SHARED,
)
from nri_resmgr.policy.topology_aware.rendering import RenderMemo, render
from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.model import Topology
from nri_resmgr.topology.synthetic import build_topology
from tests.support.builders import ctr, small, with_current

BE = QoSClass.BEST_EFFORT
BU = QoSClass.BURSTABLE
MEM = build_topology(
    {
        "packages": 1,
        "nodes": 2,
        "cores": 2,
        "threads": 2,
        "memory": "2G",
        "isolated": "3,7",
        "extra_memory_nodes": [{"kind": "pmem", "memory": "4G", "attach": 0}],
    }
)


@dataclass(frozen=True)
class Case:
    containers: list[ContainerInfo]
    #: name -> (kind, pool, cpus, mems) of the *last* decision about that container
    expect: dict[str, tuple[CPUKind, str, str, str]]
    config: Mapping[str, Any] = field(default_factory=dict)
    topology: Topology | None = None


def run(case: Case) -> dict[str, tuple[CPUKind, str, str, str]]:
    p = TopologyAwarePolicy(topology=case.topology or small(), config=case.config)
    s = p.initial_state()
    got = {}
    for c in case.containers:
        d = p.allocate(s, c)
        s = d.state
        p.check(s)
        a = d.assignment
        assert a is not None
        got[c.name] = (a.kind, a.pool, str(a.cpus), str(a.mems))
    return got


SH, EX, ISO, MIX, RES, NONE = (
    CPUKind.SHARED,
    CPUKind.EXCLUSIVE,
    CPUKind.ISOLATED,
    CPUKind.MIXED,
    CPUKind.RESERVED,
    CPUKind.NONE,
)

CASES = {
    "best-effort-to-roomiest-leaf": Case(
        [ctr("a", qos=BE)], {"a": (SH, "node1", "2-3,10-11", "1")}
    ),
    "shared-containers-spread-over-leaves": Case(
        [ctr("a", pod="a", qos=BE), ctr("b", pod="b", qos=BE), ctr("c", pod="c", qos=BE)],
        {
            "a": (SH, "node1", "2-3,10-11", "1"),
            "b": (SH, "node2", "4-5,12-13", "2"),
            "c": (SH, "node3", "6-7,14-15", "3"),
        },
    ),
    "colocate-pods-keeps-a-pod-together": Case(
        [ctr("a", qos=BE), ctr("b", qos=BE)],
        {"a": (SH, "node1", "2-3,10-11", "1"), "b": (SH, "node1", "2-3,10-11", "1")},
        config={"colocatePods": True},
    ),
    "exclusive-two-cpus-whole-core": Case(
        [ctr("a", milli=2000)], {"a": (EX, "node1", "2,10", "1")}
    ),
    "exclusive-slices-shared-pool": Case(
        [
            ctr("s", pod="s", qos=BU, milli=100, limit=200, mem=200 << 20),
            ctr("x", pod="x", milli=2000),
        ],
        {"s": (SH, "node1", "2-3,10-11", "1"), "x": (EX, "node2", "4,12", "2")},
    ),
    "too-big-for-a-node-goes-to-a-package": Case(
        [ctr("a", milli=6000)], {"a": (EX, "package1", "4-6,12-14", "2-3")}
    ),
    "burstable-beyond-a-node-goes-up": Case(
        [ctr("a", qos=BU, milli=4500, mem=200 << 20)], {"a": (SH, "package1", "4-7,12-15", "2-3")}
    ),
    "sub-cpu-guaranteed-is-shared": Case(
        [ctr("a", milli=500)], {"a": (SH, "node1", "2-3,10-11", "1")}
    ),
    "mixed-one-cpu-and-a-half": Case(
        [ctr("a", milli=1500)], {"a": (MIX, "node1", "2-3,10-11", "1")}
    ),
    "fractional-over-two-is-shared": Case(
        [ctr("a", milli=2500)], {"a": (SH, "node1", "2-3,10-11", "1")}
    ),
    "fractional-over-two-annotated-unshared-is-mixed": Case(
        [ctr("a", milli=2500, ann={PREFER_SHARED: "false"})],
        {"a": (MIX, "node1", "2-3,10-11", "1")},
    ),
    "prefer-shared-annotation": Case(
        [ctr("a", milli=2000, ann={f"{PREFER_SHARED}/container.a": "true"})],
        {"a": (SH, "node1", "2-3,10-11", "1")},
    ),
    "prefer-shared-config": Case(
        [ctr("a", milli=2000)],
        {"a": (SH, "node1", "2-3,10-11", "1")},
        config={"preferSharedCPUs": True},
    ),
    "kube-system-runs-on-reserved": Case(
        [ctr("a", ns="kube-system", qos=BU, milli=100)], {"a": (RES, "node0", "0", "0-3")}
    ),
    "reserved-namespace-glob": Case(
        [ctr("a", ns="infra-logs", qos=BE)],
        {"a": (RES, "node0", "0,8", "0-3")},
        config={"reservedPoolNamespaces": ["infra-*"], "reservedResources": {"cpu": "2"}},
    ),
    "prefer-reserved-false-opts-out": Case(
        [ctr("a", ns="kube-system", qos=BE, ann={PREFER_RESERVED: "false"})],
        {"a": (SH, "node1", "2-3,10-11", "1")},
    ),
    "prefer-reserved-annotation": Case(
        [ctr("a", qos=BE, ann={f"{PREFER_RESERVED}/pod": "true"})],
        {"a": (RES, "node0", "0", "0-3")},
    ),
    "reserved-cpuset": Case(
        [ctr("a", ns="kube-system", qos=BE), ctr("b", qos=BE)],
        {"a": (RES, "node3", "6-7", "0-3"), "b": (SH, "node0", "0-1,8-9", "0")},
        config={"reservedResources": {"cpu": "cpuset:6-7"}},
    ),
    "available-resources-limit-the-machine": Case(
        [ctr("a", milli=2000)],
        {"a": (EX, "node1", "2,10", "1")},
        config={"availableResources": {"cpu": "exclude-cpuset:4-7,12-15"}},
    ),
    "cpu-preserve-leaves-cpus-alone": Case(
        [ctr("a", milli=2000, ann={CPU_PRESERVE: "true"})], {"a": (NONE, "root", "", "0-3")}
    ),
    "memory-preserve-leaves-mems-alone": Case(
        [ctr("a", milli=2000, ann={MEMORY_PRESERVE: "true"})], {"a": (EX, "node1", "2,10", "")}
    ),
    "hide-hyperthreads": Case(
        [
            ctr("a", pod="a", milli=1000, ann={HIDE_HYPERTHREADS: "true"}),
            ctr("b", pod="b", milli=2000, ann={HIDE_HYPERTHREADS: "true"}),
        ],
        # nri-plugins' semantics: the grant is as without the annotation, one thread of
        # each core is shown (a holds 2 and sees it; b holds core 4,12 and sees 4)
        {"a": (EX, "node1", "2", "1"), "b": (EX, "node2", "4", "2")},
    ),
    "pin-nothing": Case(
        [ctr("a", milli=2000)],
        {"a": (EX, "node1", "", "")},
        config={"pinCPU": False, "pinMemory": False},
    ),
    "one-cpu-prefers-isolated": Case(
        [ctr("a", milli=1000)], {"a": (ISO, "node1", "3", "1-2")}, topology=MEM
    ),
    "isolated-preference-off-by-config": Case(
        [ctr("a", milli=1000)],
        {"a": (EX, "node0", "4", "0,2")},
        config={"preferIsolatedCPUs": False},
        topology=MEM,
    ),
    "two-cpus-isolated-only-if-annotated": Case(
        [ctr("a", pod="a", milli=2000), ctr("b", pod="b", milli=2000, ann={PREFER_ISOLATED: "1"})],
        {"a": (EX, "node0", "1,5", "0,2"), "b": (ISO, "node1", "3,7", "1-2")},
        topology=MEM,
    ),
    "default-memory-includes-attached-pmem": Case(
        [ctr("a", qos=BE, ann={})],
        {"a": (SH, "node0", "1,4-5", "0,2")},
        topology=MEM,
        config={"reservedResources": {"cpu": "cpuset:0"}},
    ),
    "memory-type-pmem-picks-the-pmem-pool": Case(
        [ctr("a", qos=BE, ann={MEMORY_TYPE: "pmem"})],
        {"a": (SH, "node0", "1,4-5", "2")},
        topology=MEM,
        config={"reservedResources": {"cpu": "cpuset:0"}},
    ),
    "memory-type-list": Case(
        [ctr("a", qos=BE, ann={MEMORY_TYPE: "dram, PMEM"})],
        {"a": (SH, "node0", "1,4-5", "0,2")},
        topology=MEM,
        config={"reservedResources": {"cpu": "cpuset:0"}},
    ),
}


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_placement(case: Case) -> None:
    assert run(case) == case.expect


def test_memory_request_filters_small_pools() -> None:
    gib = 1 << 30
    got = run(Case([ctr("a", qos=BE), ctr("b", pod="q", milli=500, mem=3 * gib)], {}))
    assert got["a"][1] == "node1" and got["b"][1] == "package1"


def test_slicing_a_node_updates_containers_of_its_ancestors() -> None:
    p = TopologyAwarePolicy(topology=small(), config={})
    s = p.initial_state()
    # too big for a node: package1 (with a memory limit all pools hold; without one the
    # root, with the most memory, would win first)
    big = ctr("big", pod="big", qos=BU, milli=4500, mem=200 << 20)
    x1 = ctr("x1", pod="x1", milli=2000)
    x2 = ctr("x2", pod="x2", milli=2000)
    d = p.allocate(s, big)
    assert d.assignment is not None and d.assignment.pool == "package1"
    d = p.allocate(d.state, x1)  # node1: nobody else there, no updates
    assert d.assignment is not None and (d.assignment.pool, d.updates) == ("node1", ())
    before = d.state
    d = p.allocate(before, x2)  # node1 cannot give 2 more; node2 can, under package1
    assert d.assignment is not None
    assert (d.assignment.pool, str(d.assignment.cpus)) == ("node2", "4,12")
    assert [(u.container_id, str(u.cpus)) for u in d.updates] == [(big.id, "5-7,13-15")]
    r = p.release(d.state, x2.id)
    assert [(u.container_id, str(u.cpus)) for u in r.updates] == [(big.id, "4-7,12-15")]
    assert r.state == before


def test_init_container_cpus_return_when_it_stops() -> None:
    p = TopologyAwarePolicy(
        topology=small(), config={"availableResources": {"cpu": "cpuset:0-3,8-11"}}
    )
    init = ctr("init", milli=4000, kind=ContainerKind.INIT)
    app = ctr("app", milli=4000)
    d = p.allocate(p.initial_state(), init)
    assert d.assignment is not None and len(d.assignment.cpus) == 4
    with pytest.raises(AllocationError, match="container app: no pool can fit 4 exclusive"):
        p.allocate(d.state, app)
    s = p.release(d.state, init.id).state
    assert s == p.initial_state()
    got = p.allocate(s, app)
    assert got.assignment is not None and got.assignment.cpus == d.assignment.cpus


def test_update_keeps_unchanged_and_moves_resized() -> None:
    p = TopologyAwarePolicy(topology=small(), config={})
    s = p.allocate(p.initial_state(), ctr("a", milli=2000)).state
    same = p.update(s, ctr("a", milli=2000))
    assert same.state == s and same.updates == ()
    grown = p.update(s, ctr("a", milli=4000))
    assert grown.assignment is not None
    # four CPUs empty node1's shared set, which nobody shares: they stay in node1
    assert (grown.assignment.pool, str(grown.assignment.cpus)) == ("node1", "2-3,10-11")


@pytest.mark.parametrize(
    ("container", "error", "message"),
    [
        pytest.param(
            ctr("c", qos=BE, ann={MEMORY_TYPE: "dram,hbmx"}),
            AnnotationError,
            "pod default/p container c: annotation memory-type.resource-policy.nri.io has "
            'unknown type "hbmx"; expected one of dram, pmem, hbm, mixed',
            id="memory-type",
        ),
        pytest.param(
            ctr("c", milli=2000, ann={f"{PREFER_SHARED}/container.c": "maybe"}),
            AnnotationError,
            "pod default/p container c: annotation prefer-shared-cpus.resource-policy.nri.io "
            'has value "maybe"; expected true or false',
            id="bad-bool",
        ),
        pytest.param(
            ctr("c", qos=BE, ann={MEMORY_TYPE: "hbm"}),
            AllocationError,
            "pod default/p container c: no pool can fit 0m shared; root: no hbm memory; "
            "package0: no hbm memory; package1: no hbm memory; node0: no hbm memory; "
            "node1: no hbm memory; node2: no hbm memory; node3: no hbm memory",
            id="no-hbm",
        ),
    ],
)
def test_errors(container: ContainerInfo, error: type[Exception], message: str) -> None:
    p = TopologyAwarePolicy(topology=small(), config={})
    with pytest.raises(error) as exc:
        p.allocate(p.initial_state(), container)
    assert str(exc.value) == message


def test_exclusive_that_fits_nowhere_names_every_pool() -> None:
    p = TopologyAwarePolicy(topology=small(), config={})
    with pytest.raises(AllocationError) as exc:
        p.allocate(p.initial_state(), ctr("c", milli=16000))
    assert str(exc.value).startswith(
        "pod default/p container c: no pool can fit 16 exclusive CPUs; "
        "root: 15000m of shared capacity allocatable, 16000m needed; "
        "package0: 7000m of shared capacity allocatable, 16000m needed"
    )


def test_a_shared_pool_is_never_emptied_under_shared_containers_and_fallback() -> None:
    p = TopologyAwarePolicy(topology=small(), config={})
    # nobody shares: all 15 non-reserved CPUs may go (n4c16 test16-idle-shared-pools)
    d = p.allocate(p.initial_state(), ctr("c", milli=15000))
    assert d.assignment is not None and len(d.assignment.cpus) == 15
    with pytest.raises(AllocationError, match="no pool can fit 0m shared; root: no shared CPUs"):
        p.allocate(d.state, ctr("be", pod="be", qos=BE))
    # a BestEffort container (0m) shares root: its last CPU is not taken (the 1m rule)
    be = p.allocate(p.initial_state(), ctr("be", pod="be", qos=BE)).state
    with pytest.raises(AllocationError, match="root: 14999m of shared capacity allocatable"):
        p.allocate(be, ctr("c", milli=15000))
    # with fallbackToShared the 15000m are tried shared, and the 1m rule refuses them too
    q = TopologyAwarePolicy(topology=small(), config={"fallbackToShared": True})
    be = q.allocate(q.initial_state(), ctr("be", pod="be", qos=BE)).state
    with pytest.raises(AllocationError, match="no pool can fit 15000m shared; root: 14999m"):
        q.allocate(be, ctr("c", milli=15000))
    d = q.allocate(be, ctr("c", milli=14500))
    assert d.assignment is not None
    assert (d.assignment.kind, d.assignment.pool) == (CPUKind.SHARED, "root")


@pytest.mark.parametrize(
    ("config", "message"),
    [
        pytest.param(
            {"reservedResources": {"cpu": "0"}},
            "reservedResources.cpu: expected a non-zero CPU amount, found '0'",
            id="zero",
        ),
        pytest.param(
            {"reservedResources": {}},
            "reservedResources.cpu: expected a quantity such as 750m or cpuset:0-1 (required), "
            "found none",
            id="absent",
        ),
        pytest.param(
            {"reservedResources": {"cpu": "cpuset:0-99"}},
            "includes CPUs 16-99 outside the available CPUs 0-15",
            id="outside",
        ),
        pytest.param(
            {"availableResources": {"cpu": "0-3"}},
            "availableResources.cpu: expected cpuset:LIST or exclude-cpuset:LIST, found '0-3'",
            id="available-form",
        ),
        pytest.param(
            {"availableResources": {"cpu": "cpuset:99"}},
            "leaves no online CPU",
            id="available-empty",
        ),
        pytest.param(
            {"pinCpu": True},
            "unknown key pinCpu; expected one of defaultCPUPriority, ",
            id="typo",
        ),
        pytest.param(
            {"colocatePods": "often"},
            "colocatePods: expected a valid boolean, found 'often'",
            id="bad-bool",
        ),
        pytest.param(
            {"reservedResources": {"cpu": "cpuset:0-15"}},
            "takes every available CPU",
            id="all-reserved",
        ),
    ],
)
def test_config_errors(config: Mapping[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=r"^policy topology-aware: ") as exc:
        TopologyAwarePolicy(topology=small(), config=config)
    assert message in str(exc.value)


# ---- rebuild ------------------------------------------------------------------------------


def test_rebuild_keeps_valid_placements_without_updates() -> None:
    p = TopologyAwarePolicy(topology=small(), config={})
    s = p.initial_state()
    cs = [
        ctr("s", pod="s", qos=BU, milli=200),
        ctr("x", pod="x", milli=2000),
        ctr("k", pod="k", ns="kube-system", qos=BE),
        ctr("m", pod="m", milli=1500),
    ]
    for c in cs:
        s = p.allocate(s, c).state
    r = p.render(s)
    d = p.rebuild([with_current(c, r[c.id].cpus, r[c.id].mems) for c in cs])
    assert d.updates == ()
    assert d.state == s


def test_rebuild_keeps_a_fallback_container_shared_when_a_shared_one_reports_its_cpus() -> None:
    """A Hypothesis example (1s1n4c2t, fallbackToShared): rebuilding moved a shared one.

    CPU 0 is reserved; x takes 1-3,5-7 exclusively, which leaves CPU 4 shared for s, so f
    falls back to shared on 4, next to s.  f's cpuset {4} has the size of its request, so it
    is a valid claim on its own, and the smaller one: kept first, it made x's claim
    empty the shared CPUs, x went shared on 1-3,5-7 and s moved there with it.  s
    reports CPU 4 too: the claim nobody else reports is the one to keep first.
    """
    t = build_topology({"packages": 1, "nodes": 1, "cores": 4, "threads": 2, "memory": "4G"})
    p = TopologyAwarePolicy(topology=t, config={"fallbackToShared": True})
    s = p.initial_state()
    cs = [ctr("x", pod="x", milli=6000), ctr("f", pod="f", milli=1000), ctr("s", pod="s")]
    for c in (cs[0], cs[2], cs[1]):  # s first: with nobody sharing, f would take CPU 4
        s = p.allocate(s, c).state
    r = p.render(s)
    assert [(str(r[c.id].cpus), r[c.id].kind) for c in cs] == [
        ("1-3,5-7", CPUKind.EXCLUSIVE),
        ("4", CPUKind.SHARED),
        ("4", CPUKind.SHARED),
    ]
    d = p.rebuild([with_current(c, r[c.id].cpus, r[c.id].mems) for c in cs])
    p.check(d.state)
    assert d.updates == (), d.reason
    assert d.state == s


def test_rebuild_keeps_fallback_containers_shared_when_they_are_pools_shared_sets() -> None:
    """Siblings of the example above on two nodes, found with a targeted generator.

    1 package x 2 nodes x 3 cores (node0 = 0-2, node1 = 3-5), CPU 0 reserved: s and t
    share node1 and node0, so x takes 1,3-4 in the root; f falls back to node0's shared
    CPU 2, next to t, and g to node1's shared CPU 5, next to s.  Were f's {2} kept
    first (the smaller claim), x's claim would empty node0's shared CPUs, and x and s
    would move.  {2} is node0's sharable CPUs minus x's claim: a shared set, kept after
    the claims that are not, and the last CPU of t's cpuset, which no claim may take.
    """
    t = build_topology({"packages": 1, "nodes": 2, "cores": 3, "threads": 1, "memory": "2G"})
    p = TopologyAwarePolicy(topology=t, config={"fallbackToShared": True})
    cs = [
        ctr("s", pod="s"),
        ctr("t", pod="t"),
        ctr("x", pod="x", milli=3000),
        ctr("f", pod="f", milli=1000),
        ctr("g", pod="g", milli=1000),
    ]
    for n in (4, 5):  # without g, then with it
        s = p.initial_state()
        for c in cs[:n]:
            s = p.allocate(s, c).state
        r = p.render(s)
        assert [(str(r[c.id].cpus), r[c.id].kind) for c in cs[:n]] == [
            ("5", CPUKind.SHARED),
            ("2", CPUKind.SHARED),
            ("1,3-4", CPUKind.EXCLUSIVE),
            ("2", CPUKind.SHARED),
            ("5", CPUKind.SHARED),
        ][:n]
        d = p.rebuild([with_current(c, r[c.id].cpus, r[c.id].mems) for c in cs[:n]])
        p.check(d.state)
        assert d.updates == (), d.reason
        assert d.state == s


def test_rebuild_moves_overlapping_stale_and_wrong_kind() -> None:
    p = TopologyAwarePolicy(topology=small(), config={})
    cs = [
        ctr("a", pod="a", milli=2000, cur="4,12", cur_mems="2"),
        ctr("b", pod="b", milli=2000, cur="4,12", cur_mems="2"),  # same CPUs as a
        ctr("c", pod="c", milli=2000, cur="0,8", cur_mems="0"),  # includes reserved CPU 0
        ctr("d", pod="d", qos=BE, cur="6,14", cur_mems="3"),  # shared now, not exclusive
    ]
    d = p.rebuild(cs)
    p.check(d.state)
    assert isinstance(d.state, TopologyAwareState)
    # a and b both claim 4,12: neither holds them alone, so both are placed afresh
    grants = {c.name: d.state.grants[c.id] for c in cs}
    assert grants["a"].exclusive.isdisjoint(grants["b"].exclusive)
    assert 0 not in grants["c"].exclusive | grants["b"].exclusive
    assert grants["d"].kind is CPUKind.SHARED
    moved = {u.container_id for u in d.updates}
    assert {cs[2].id, cs[3].id} <= moved and len(moved & {cs[0].id, cs[1].id}) >= 1


def test_invariant_checker_catches_broken_states() -> None:
    p = TopologyAwarePolicy(topology=small(), config={})
    s = p.allocate(p.initial_state(), ctr("a", pod="a", milli=2000)).state
    assert isinstance(s, TopologyAwareState)
    grant = next(iter(s.grants.values()))
    twin = replace(grant, container_id=ContainerID("twin"))
    broken = s.with_grant(twin)
    with pytest.raises(InvariantError, match="cpu 2 is exclusive to both a-a and twin"):
        p.check(broken)
    emptied = s.with_grant(
        replace(grant, container_id=ContainerID("x"), exclusive=IDSet.parse("3,11"))
    )
    p.check(emptied)  # nobody shares node1: its shared set may be sliced empty
    sharer = replace(
        grant,
        container_id=ContainerID("s"),
        kind=CPUKind.SHARED,
        exclusive=IDSet(),
        request=replace(grant.request, kind=CPUKind.SHARED, full=0, shared_milli=0),
    )
    starved = emptied.with_grant(sharer)
    with pytest.raises(InvariantError, match="node1: shared set is empty under 1 shared"):
        p.check(starved)


def test_a_decision_writes_nothing_into_the_state_it_is_given() -> None:
    """The supply is part of a state when it is built: deciding against a state (its
    supply read for offers, rendering and the invariants) leaves that state as it was,
    down to the last derived figure."""
    p = TopologyAwarePolicy(topology=small(), config={})
    s = p.initial_state()
    for c in (ctr("a", pod="a", milli=2000), ctr("b", pod="b", qos=BU, milli=500)):
        frozen = pickle.dumps(s)
        d = p.allocate(s, c)
        assert pickle.dumps(s) == frozen
        assert isinstance(d.state, TopologyAwareState)
        s = d.state
    frozen = pickle.dumps(s)
    p.check(s)
    p.release(s, ContainerID("a-a"))
    p.rebuild([with_current(ctr("a", pod="a", milli=2000), IDSet.parse("2,10"), None)])
    assert pickle.dumps(s) == frozen


def test_invariant_problems_are_returned_not_raised() -> None:
    """The invariants are a list of problems; only `check_invariants` raises."""
    p = TopologyAwarePolicy(topology=small(), config={})
    s = p.allocate(p.initial_state(), ctr("a", pod="a", milli=2000)).state
    assert isinstance(s, TopologyAwareState)
    assert invariant_problems(p.topology, s) == ()
    grant = next(iter(s.grants.values()))
    twin = replace(grant, container_id=ContainerID("twin"))
    assert check_addition(p.topology, s, twin) == (
        "cpu 2 is exclusive to both a-a and twin",
        "cpu 10 is exclusive to both a-a and twin",
    )
    moved = replace(twin, exclusive=IDSet.parse("4,12"))
    assert check_addition(p.topology, s, moved) == ("twin: exclusive 4,12 outside pool node1",)


@pytest.mark.parametrize(
    ("spec", "shape"),
    [
        pytest.param(
            {"packages": 2, "nodes": 2, "cores": 2, "threads": 2},
            ["root", " package0", " package1", "  node0", "  node1", "  node2", "  node3"],
            id="2s2n",
        ),
        pytest.param({"packages": 1, "nodes": 1, "cores": 4}, ["root"], id="desktop"),
        pytest.param(
            {"packages": 1, "dies": 2, "nodes": 1, "cores": 4, "l3_per_die": 2},
            ["root", " die0", " die1", "  l3-0", "  l3-1", "  l3-2", "  l3-3"],
            id="dies-and-l3",
        ),
        pytest.param(
            {"packages": 1, "nodes": 2, "cores": 2},
            ["root", " node0", " node1"],
            id="one-package-collapses",
        ),
    ],
)
def test_pool_tree_shapes(spec: dict[str, int], shape: list[str]) -> None:
    p = TopologyAwarePolicy(topology=build_topology(spec), config={})
    assert [" " * pool.depth + pool.name for pool in p.tree] == shape
    for pool in p.tree:
        kids = [p.tree.pools[c] for c in pool.children]
        if kids:  # a parent is the disjoint union of its children
            assert sum(len(k.cpus) for k in kids) == len(pool.cpus)
            assert pool.cpus == IDSet(c for k in kids for c in k.cpus)


def test_cpu_less_memory_attaches_to_the_closest_node() -> None:
    p = TopologyAwarePolicy(topology=MEM, config={})
    node0, node1 = p.tree.by_name("node0"), p.tree.by_name("node1")
    assert (str(node0.mems_of(ALL)), str(node1.mems_of(ALL))) == ("0,2", "1")
    assert (str(node0.isolated), str(node1.isolated)) == ("", "3,7")


def test_a_kept_rendering_is_used_only_for_the_same_grant_and_shared_set() -> None:
    """`RenderMemo` renders again for another grant (here: CPUs not pinned) on the same
    shared set, and for another shared set of the same grant."""
    p = TopologyAwarePolicy(topology=small(), config={})
    s = p.initial_state()
    for name in ("a", "b"):
        s = p.allocate(s, ctr(name, qos=QoSClass.BURSTABLE, milli=500, cid=name)).state
    a, memo = ContainerID("a"), RenderMemo()

    def rendered(state: TopologyAwareState) -> Assignment:
        return memo.render(tree=state.tree, topology=p.topology, state=state, cid=a)

    first = rendered(s)
    assert first == render(tree=s.tree, topology=p.topology, supply=s.supply, grant=s.grants[a])
    assert rendered(s) is first, "the same grant and shared set: the rendering kept"
    g = s.grants[a]
    unpinned = replace(
        s, grants=s.grants.set(a, replace(g, request=replace(g.request, pin_cpu=False)))
    )
    assert rendered(unpinned) != first and rendered(unpinned).cpus == IDSet()
    s2 = p.allocate(s, ctr("x", qos=QoSClass.GUARANTEED, milli=1000, cid="x")).state
    if s2.supply.shared[g.pool] is not s.supply.shared[g.pool]:
        assert rendered(s2).cpus == s2.supply.shared[g.pool]
