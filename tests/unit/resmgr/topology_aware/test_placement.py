"""The topology-aware policy's exact placements: a table of containers and the kind, pool,
CPUs and memory nodes each gets, with the annotations that steer them; slicing, init
containers, updates and the pool tree.

The main machine (`small()`) is 2 packages x 2 NUMA nodes x 2 cores x 2 threads:
node0 = 0-1,8-9  node1 = 2-3,10-11  node2 = 4-5,12-13  node3 = 6-7,14-15; CPU n and
n+8 are siblings.  With the default ``reservedResources.cpu: 750m`` CPU 0 is reserved.
`MEM` is 1 package x 2 nodes x 2 cores x 2 threads (node0 = 0-1,4-5, node1 = 2-3,6-7)
plus a CPU-less PMEM node 2 attached to node0, and kernel-isolated CPUs 3 and 7.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from nri_resmgr.model import (
    AllocationError,
    ContainerInfo,
    ContainerKind,
    CPUKind,
)
from nri_resmgr.policy.topology_aware import (
    TopologyAwarePolicy,
)
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
from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.model import Topology
from nri_resmgr.topology.synthetic import build_topology
from tests.support.builders import BE, BU, ctr, small

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
