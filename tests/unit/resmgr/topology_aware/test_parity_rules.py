"""Placements nri-plugins v0.14.0's topology-aware plugin makes, case by case (issue 22).

Each test is one divergence the differential runs against their plugin found, on their
n4c16 machine as QEMU numbers it (`tests/parity/machines.py`: node n is CPUs 4n..4n+3,
the two threads of a core adjacent) with their default configuration (750m reserved,
so CPU 0 is reserved).  The expected CPUs are theirs; each test fails with the rule it
names taken out:

- **which exclusive CPU** (their ``cpuallocator``, `nri_resmgr.policy.cpu_allocator`):
  out of a node's sliceable CPUs, a single CPU is a thread of a core already broken;
- **the 1m rule** (their ``AllocatableSharedCPU``): a pool holding a container with no
  CPU request keeps 1m back, so an exclusive grant prefers an empty node, and a
  BestEffort container avoids a pool whose shared capacity is all requested;
- **memory burstability** (their ``compareScores``): a Burstable container without a
  memory limit goes to the pool with the most memory, the root.
"""

from __future__ import annotations

import dataclasses

from nri_resmgr.model import ContainerInfo, QoSClass
from nri_resmgr.policy.cpu_allocator import CPUAllocator
from nri_resmgr.policy.topology_aware.preferences import PREFER_SHARED
from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.synthetic import build_topology
from tests.parity.machines import N4C16, helm_config
from tests.support.builders import ctr
from tests.support.topology_aware import Node, besteffort, guaranteed


def n4c16() -> Node:
    return Node(helm_config(), topology=build_topology(N4C16))


def test_allocator_takes_the_thread_of_a_broken_core() -> None:
    """Of CPUs 8-11 (cores 8-9, 10-11), three are sliceable next to a 500m container:
    8-9 (an idle core) and 10; one CPU out of those is 10, whose sibling is not free."""
    t = build_topology(N4C16)
    cpus = t.online_cpus()
    alloc = CPUAllocator(t, high=IDSet(), normal=cpus, low=IDSet(), hybrid=False)
    sliceable = alloc.allocate(IDSet.parse("8-11"), 3)
    assert sliceable == IDSet.parse("8-10")
    assert alloc.allocate(IDSet.parse("8-10"), 1) == IDSet([10])


def test_exclusive_cpu_leaves_the_shared_set_whole_cores() -> None:
    """Issue 22, cause 1: node2 (8-11) holds a 500m container; a 1-CPU container there
    gets CPU 10 (theirs), and the shared set keeps 8-9 and 11 (ours gave it CPU 8)."""
    n = n4c16()
    n.create(guaranteed("e0", 3000))  # node1
    n.create(guaranteed("b", 500))  # node2: fewest containers, most room
    n.create(guaranteed("e1", 3000))  # node3: most sliceable room
    assert n.cpus("b") == IDSet.parse("8-11")
    n.create(guaranteed("g", 1000))  # node2 has the most sliceable room now
    assert n.cpus("g") == IDSet([10])
    assert n.cpus("b") == IDSet.parse("8-9,11")


def test_exclusive_grant_prefers_a_node_without_besteffort() -> None:
    """Issue 22, cause 2: a BestEffort container in node1 keeps 1m of its room back, so
    a 2-CPU container goes to the empty node2 (ours squeezed node1, lowest index)."""
    n = n4c16()
    n.create(besteffort("be"))
    assert n.cpus("be") == IDSet.parse("4-7")
    n.create(guaranteed("g", 2000))
    assert n.nodes("g") == {2}
    assert n.cpus("be") == IDSet.parse("4-7")


def test_besteffort_avoids_a_fully_requested_pool() -> None:
    """Issue 22, cause 2: node1's shared capacity is all requested (4000m on 4 CPUs), so
    a BestEffort container goes elsewhere though node1 holds the fewest containers."""
    n = n4c16()
    n.create(ctr("full", pod="full", milli=4000, cid="full", ann={PREFER_SHARED: "true"}))
    assert n.cpus("full") == IDSet.parse("4-7")
    for i in range(6):
        n.create(guaranteed(f"s{i}", 500))
    assert all(n.nodes(f"s{i}") != {1} for i in range(6))
    n.create(besteffort("be"))
    assert n.nodes("be") != {1}
    assert n.cpus("be") == IDSet.parse("8-11")


def burstable_memory(
    name: str, milli: int, *, limit: int, memory_limit: int | None
) -> ContainerInfo:
    c = ctr(name, pod=name, qos=QoSClass.BURSTABLE, milli=milli, limit=limit, cid=name)
    request = dataclasses.replace(c.request, memory_request=None, memory_limit=memory_limit)
    return dataclasses.replace(c, request=request)


def test_burstable_without_memory_limit_goes_to_the_root() -> None:
    """Issue 22, cause 3: without a memory limit the pool with the most memory wins (the
    root: every shared CPU, every node); with one that every pool holds, the deepest."""
    n = n4c16()
    n.create(burstable_memory("open", 500, limit=1000, memory_limit=None))
    assert n.cpus("open") == IDSet.parse("1-15")
    assert n.a("open").mems == IDSet.parse("0-3")
    n.create(burstable_memory("capped", 500, limit=1000, memory_limit=100 << 20))
    assert len(n.nodes("capped")) == 1


def test_reserved_cpu_is_their_allocators_pick() -> None:
    """750m reserved on a machine whose CPU 13 and 14 are isolated: their allocator takes
    a thread whose sibling is unavailable, CPU 12 (ours took CPU 0), so CPU 0-1 are an
    exclusive container's (a differential run on a random machine)."""
    spec = {"packages": 2, "dies": 2, "cores": 4, "threads": 2, "memory": "16G",
            "l3_per_die": 2, "numbering": "qemu", "isolated": "13-14"}  # fmt: skip
    n = Node(helm_config(), topology=build_topology(spec))
    assert n.policy.config.reserved == IDSet([12])
    n.create(guaranteed("g", 2000))
    assert n.cpus("g") == IDSet.parse("0-1")


def test_reserved_container_gets_the_roots_memory() -> None:
    """A kube-system container runs on the reserved CPU 0 (node0) with the memory of every
    node: nri-plugins' ``allocatePool`` offers reserved containers the root pool's memory
    (ours gave node0's, the pool holding the reserved CPUs; a differential run on random
    machines)."""
    n = n4c16()
    n.create(besteffort("sys", ns="kube-system"))
    assert n.cpus("sys") == IDSet([0])
    assert n.a("sys").mems == IDSet.parse("0-3")


def test_memory_of_a_kind_the_pool_lacks_is_its_nearest_node() -> None:
    """Node1 of a machine whose PMEM node 2 is attached to node0: a 4-CPU container, which
    only node1 holds (node0 keeps CPU 0 reserved), gets node1 and PMEM node 2, as
    nri-plugins' memory allocator widens the pool's zone by the nearest node of each
    requested kind it lacks (ours gave node1 alone; a differential run on a random
    machine); on node0, which has both kinds, nothing is added."""
    spec = {"packages": 1, "nodes": 2, "cores": 2, "threads": 2, "memory": "2G",
            "extra_memory_nodes": [{"kind": "pmem", "memory": "4G", "attach": 0}]}  # fmt: skip
    n = Node(helm_config(), topology=build_topology(spec))
    n.create(guaranteed("g", 4000), besteffort("b"))
    assert n.a("g").pool == "node1"
    assert n.a("g").mems == IDSet.parse("1-2")
    assert n.a("b").mems == IDSet.parse("0,2")


def test_memory_span_counts_the_nodes_a_kind_the_pool_lacks_adds() -> None:
    """Two PMEM nodes attached to node1: a BestEffort container on node0 would get node0
    and both PMEM nodes (the nearest of the kind node0 lacks), as many as on node1, so
    their "tighter memory offer" is a tie and node1, holding every kind, wins (ours
    counted node0's missing kind as one node and took node0; a differential run on a
    random machine)."""
    spec = {"packages": 1, "nodes": 2, "cores": 2, "threads": 2, "memory": "2G",
            "extra_memory_nodes": [{"kind": "pmem", "memory": "4G", "attach": 1},
                                   {"kind": "pmem", "memory": "4G", "attach": 1}]}  # fmt: skip
    n = Node(helm_config(), topology=build_topology(spec))
    n.create(besteffort("b"))
    assert n.a("b").pool == "node1"
    assert n.a("b").mems == IDSet.parse("1-3")
