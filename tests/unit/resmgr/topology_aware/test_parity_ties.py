"""Three ties nri-plugins' topology-aware plugin breaks its own way, followed here.

Each was an undocumented divergence of the differential test (docs/policies.md,
"Differential test"):

* a CPU-less PMEM or HBM node as near two CPU nodes belongs to both (their
  ``getClosestSpecialMem`` attaches it to every node of the closest distance group;
  ours named the lower id only), so both packages' pools own it and a BestEffort
  container spreads to the second package with the memory there (`parity/s8c4k`);
* a Burstable container without a CPU limit is ranked by its ``unlimitedBurstable``
  level, its room there, then the lower pool id, and nothing after: their
  ``compareScores`` returns there, before memory span, memory kinds and depth
  (`random/10`);
* that id is theirs: ``enumeratePools`` numbers the pools depth-first, children before
  their parent, so the root is last.
"""

from __future__ import annotations

from dataclasses import replace

from nri_resmgr.model import MemoryKind, QoSClass
from nri_resmgr.policy.topology_aware import TopologyAwarePolicy
from nri_resmgr.policy.topology_aware.pools import local_mems
from nri_resmgr.topology.cpuset import IDSet
from tests.support.builders import ctr, topo
from tests.support.topology_aware import Node, besteffort

#: two one-node packages of two CPUs each and an 8G PMEM node (2) as near both
EVEN_PMEM = topo(
    packages=2,
    nodes=1,
    cores=2,
    threads=1,
    memory="2G",
    extra_memory_nodes=[
        {"kind": "pmem", "memory": "8G", "attach": 0, "distances": {0: 17, 1: 17}},
    ],
)
RESERVED = {"reservedResources": {"cpu": "750m"}}


def test_a_pmem_node_as_near_two_packages_belongs_to_both() -> None:
    assert local_mems(EVEN_PMEM, IDSet({0}), MemoryKind.PMEM) == IDSet({2})
    assert local_mems(EVEN_PMEM, IDSet({1}), MemoryKind.PMEM) == IDSet({2})
    tree = TopologyAwarePolicy(topology=EVEN_PMEM, config=RESERVED).tree
    owners = {p.name for p in tree if 2 in p.mems.get(MemoryKind.PMEM, IDSet())}
    assert owners == {"root", "package0", "package1"}


def test_besteffort_containers_spread_over_packages_sharing_a_pmem_node() -> None:
    """The second BestEffort container goes to the package without one (fewer
    containers), its memory the package's DRAM and the shared PMEM node; with the PMEM
    node package 0's alone, package 1 lacked a kind and lost."""
    node = Node(RESERVED, EVEN_PMEM)
    node.create(besteffort("a"), besteffort("b"))
    placed = {frozenset(node.nodes(n)) for n in ("a", "b")}
    assert placed == {frozenset({0}), frozenset({1})}
    second = "b" if node.nodes("b") == {1} else "a"
    assert node.a(second).mems == IDSet({1, 2})


#: random/10 of the CI profile: one package, two nodes of 6 cores x 2 threads, an 8G
#: PMEM node attached to node 1
ONE_PACKAGE_PMEM = topo(
    packages=1,
    dies=1,
    nodes=2,
    cores=6,
    threads=2,
    memory="2G",
    l3_per_die=2,
    numbering="qemu",
    extra_memory_nodes=[{"kind": "pmem", "memory": "8G", "attach": 1}],
)


def test_unlimited_burstable_below_its_level_goes_by_their_pool_id() -> None:
    """A Burstable container without a CPU limit whose anti-affinity keeps it off the
    root (at its level) ranks the two nodes, both below the level, by id: node 0, though
    node 1 has PMEM (the container's memory kinds) and as much room."""
    node = Node(RESERVED, ONE_PACKAGE_PMEM)
    first = ctr("c0", pod="p1", qos=QoSClass.BURSTABLE, milli=1000, cid="c0")
    anti = {"resource-policy.nri.io/anti-affinity": "c1: [ c0 ]\n"}
    second = ctr("c1", pod="p1", qos=QoSClass.BURSTABLE, milli=3000, ann=anti, cid="c1")
    # a memory limit every node holds (without one the roomiest memory would win first)
    second = replace(second, request=replace(second.request, memory_limit=256 << 20))
    node.create(first, second)
    assert node.a("c0").pool == "root"
    assert node.a("c1").pool == "node0"


def test_their_pool_ids_number_children_before_their_parent() -> None:
    tree = TopologyAwarePolicy(topology=topo(packages=2, nodes=2, cores=1, threads=1),
                               config=RESERVED).tree
    ids = {p.name: p.their_id for p in tree}
    assert ids == {
        "node0": 0, "node1": 1, "package0": 2, "node2": 3, "node3": 4, "package1": 5,
        "root": 6,
    }
