"""nri-plugins' supply rules in the topology-aware policy: scenarios.

The scenarios run on nri-plugins' n4c16 machine shape (`small()`: 2 packages x 2 NUMA
nodes x 2 cores x 2 threads, ``reservedResources.cpu: 750m``, so CPU 0 is reserved) and
name the test of their e2e suite (test/e2e/policies.test-suite/topology-aware/n4c16)
they mirror.  Their CPU numbering differs from ours (their node n is CPUs 4n..4n+3), so
the assertions are theirs in shape: counts, NUMA nodes, disjointness.  The same rules as
properties are `test_rules_props`; read back from a runtime's reports, `test_rules_rebuild`.

- **Shared-pool rule**: an exclusive grant may take a pool's last shared CPUs when no
  shared container lives there (nri-plugins ``AllocatableSharedCPU() >= 1000*cnt``, one
  milli kept back for 0m containers); shared containers are never left on an empty or
  exclusive set, and a later shared container goes where shared CPUs are left.
- **Fractional reserved**: ``750m`` is 750m of capacity on the reserved CPU (their
  open #632); a reserved request beyond it runs on the root pool's shared CPUs.
"""

from __future__ import annotations

import pytest

from nri_resmgr.model import (
    ContainerInfo,
    CPUKind,
)
from nri_resmgr.topology.cpuset import CPUSet, IDSet, union
from nri_resmgr.topology.synthetic import build_topology
from tests.support.builders import BU, ctr
from tests.support.topology_aware import Node, besteffort, guaranteed


def burstable(name: str, milli: int, limit: int | None = None) -> ContainerInfo:
    """With a 200M memory limit every pool holds (without one the root would win first:
    nri-plugins ranks Burstable containers by memory before CPU)."""
    return ctr(name, pod=name, qos=BU, milli=milli, limit=limit, mem=200 << 20, cid=name)


def disjoint(*sets: CPUSet) -> bool:
    return sum(len(s) for s in sets) == len(union(sets))


def test_four_three_cpu_containers_one_per_numa_node() -> None:
    """n4c16/test02-shrink-and-grow-shared (pod2), and issue 14: refused before."""
    n = Node()
    n.create(*(guaranteed(f"c{i}", 3000, pod="pod2") for i in range(4)))
    assert all(len(n.cpus(f"c{i}")) == 3 and len(n.nodes(f"c{i}")) == 1 for i in range(4))
    assert disjoint(*(n.cpus(f"c{i}") for i in range(4)))
    assert set().union(*(n.nodes(f"c{i}") for i in range(4))) == {0, 1, 2, 3}
    n.rebuilt_moves_nobody()


def test_shrink_and_grow_shared() -> None:
    """n4c16/test02-shrink-and-grow-shared, all steps."""
    n = Node({"colocatePods": True})
    n.create(guaranteed("p0c0", 5000, pod="pod0"), guaranteed("p0c1", 5000, pod="pod0"))
    assert len(n.cpus("p0c0")) == len(n.cpus("p0c1")) == 5
    assert len(n.nodes("p0c0")) == len(n.nodes("p0c1")) == 2
    assert disjoint(n.cpus("p0c0"), n.cpus("p0c1"))
    n.create(besteffort("p1c0", pod="pod1"), besteffort("p1c1", pod="pod1"))
    be = n.cpus("p1c0") | n.cpus("p1c1")
    assert n.cpus("p1c0") and n.cpus("p1c1")
    assert disjoint(n.cpus("p0c0") | n.cpus("p0c1"), be)
    n.delete("p0c0", "p0c1")
    # squeeze the BestEffort containers to the minimum
    n.create(*(guaranteed(f"p2c{i}", 3000, pod="pod2") for i in range(4)))
    assert all(len(n.cpus(f"p2c{i}")) == 3 for i in range(4))
    assert disjoint(*(n.cpus(f"p2c{i}") for i in range(4)))
    # the last non-reserved CPU that can be taken from the shared pools
    n.create(guaranteed("p3c0", 1000, pod="pod3"))
    be = n.cpus("p1c0") | n.cpus("p1c1")
    exclusive = union(n.cpus(f"p2c{i}") for i in range(4)) | n.cpus("p3c0")
    assert be and disjoint(be, exclusive)
    n.rebuilt_moves_nobody()


def test_seven_cpus_next_to_five_in_one_package() -> None:
    """n4c16/test01-always-fits (pod4, pod5): a 7-CPU container fills package0."""
    n = Node({"colocatePods": True})
    n.create(guaranteed("pod4c0", 5000))
    assert len(n.cpus("pod4c0")) == 5 and n.cores("pod4c0") == 3 and len(n.nodes("pod4c0")) == 2
    n.create(guaranteed("pod5c0", 7000))
    assert len(n.cpus("pod5c0")) == 7 and n.cores("pod5c0") == 4
    packages = {n.topology.cpu(c).package_id for c in n.cpus("pod5c0")}
    assert len(packages) == 1
    assert disjoint(n.cpus("pod4c0"), n.cpus("pod5c0"))
    n.rebuilt_moves_nobody()


def test_a_two_cpu_node_gives_exclusive_cpus() -> None:
    """Issue 14: a node of one core (2 threads) had no exclusive CPUs to give."""
    t = build_topology({"packages": 1, "nodes": 3, "cores": 1, "threads": 2, "memory": "1G"})
    n = Node(topology=t)
    n.create(guaranteed("a", 2000), guaranteed("b", 2000))
    assert [n.a(x).pool for x in "ab"] == ["node1", "node2"]
    assert [len(n.nodes(x)) for x in "ab"] == [1, 1]
    # a shared container goes where shared CPUs are left: node0's CPU next to reserved 0
    n.create(besteffort("be"))
    assert (n.a("be").pool, n.nodes("be")) == ("node0", {0})
    n.rebuilt_moves_nobody()


def test_idle_shared_pools_are_sliced_empty() -> None:
    """n4c16/test16-idle-shared-pools."""
    n = Node()
    n.create(*(guaranteed(f"pod0c{i}", 4000, pod="pod0") for i in range(3)))
    pod0 = [f"pod0c{i}" for i in range(3)]
    assert all(len(n.cpus(c)) == 4 and len(n.nodes(c)) == 1 for c in pod0)
    assert disjoint(*(n.cpus(c) for c in pod0))
    # BestEffort and Burstable containers go to the only pool with free CPUs
    n.create(*(besteffort(f"pod1c{i}", pod="pod1") for i in range(4)))
    assert len({n.cpus(f"pod1c{i}") for i in range(4)}) == 1
    n.create(*(burstable(f"pod2c{i}", 100, 150) for i in range(4)))
    assert {n.cpus(f"pod2c{i}") for i in range(4)} == {n.cpus("pod1c0")}
    used = [n.nodes(c) for c in pod0] + [n.nodes("pod1c0")]
    assert sum(len(x) for x in used) == len(set().union(*used)) == 4
    n.rebuilt_moves_nobody()
    for name in list(n.live):
        n.delete(name)
    # the other way around: shared first, then a whole idle NUMA node is taken
    n.create(besteffort("pod3c0", pod="pod3"), besteffort("pod3c1", pod="pod3"))
    assert disjoint(n.cpus("pod3c0"), n.cpus("pod3c1"))
    n.create(guaranteed("pod4c0", 4000))
    assert len(n.cpus("pod4c0")) == 4 and len(n.nodes("pod4c0")) == 1
    assert disjoint(n.cpus("pod4c0"), n.cpus("pod3c0"), n.cpus("pod3c1"))
    assert not n.nodes("pod4c0") & (n.nodes("pod3c0") | n.nodes("pod3c1"))
    n.rebuilt_moves_nobody()


@pytest.mark.parametrize(
    "sharer",
    [
        pytest.param(lambda i: besteffort(f"s{i}", pod="pod0"), id="besteffort"),
        pytest.param(lambda i: burstable(f"s{i}", 1, 750), id="burstable-1m"),
        pytest.param(lambda i: burstable(f"s{i}", 250, 750), id="burstable-250m"),
    ],
)
def test_busy_shared_pools_are_not_sliced_empty(sharer: object) -> None:
    """n4c16/test15-busy-shared-pools: one shared container per NUMA node keeps them."""
    assert callable(sharer)
    n = Node()
    n.create(*(sharer(i) for i in range(4)))
    assert set().union(*(n.nodes(f"s{i}") for i in range(4))) == {0, 1, 2, 3}
    n.create(guaranteed("g", 4000))
    assert n.a("g").pool.startswith("package")
    assert disjoint(n.cpus("g"), *(n.cpus(f"s{i}") for i in range(4)))
    assert all(n.cpus(f"s{i}") for i in range(4))
    n.rebuilt_moves_nobody()


def test_a_shared_container_is_never_left_on_an_emptied_set() -> None:
    """The rule's other half: with a 0m container in node1, node1 keeps a CPU."""
    n = Node()
    n.create(besteffort("be"))
    where = n.a("be").pool
    node = n.policy.tree.by_name(where)
    n.create(guaranteed("g", 1000 * len(node.sharable)))
    assert n.cpus("be") and disjoint(n.cpus("be"), n.cpus("g"))
    assert n.a("g").pool != where


def test_reserved_750m_is_750m() -> None:
    """nri-plugins #632 (open there): 750m reserved is not a whole CPU of capacity."""
    n = Node()
    n.create(ctr("a", pod="a", ns="kube-system", milli=500, cid="a"))
    assert (n.a("a").kind, str(n.cpus("a"))) == (CPUKind.RESERVED, "0")
    n.create(ctr("b", pod="b", ns="kube-system", milli=250, cid="b"))
    assert n.a("b").kind is CPUKind.RESERVED
    # 750m of 750m taken: the next runs on the machine's shared CPUs, as nri-plugins
    # does for a reserved request beyond the reserved capacity (test05 pod5)
    n.create(ctr("c", pod="c", ns="kube-system", milli=100, cid="c"))
    assert (n.a("c").kind, n.a("c").pool) == (CPUKind.SHARED, "root")
    assert n.last is not None and "reserved capacity exceeded" in n.last.reason
    assert "0m free of 750m reserved on 0" in n.last.reason
    # BestEffort kube-system containers (0m) still fit on the reserved CPU
    n.create(besteffort("k", ns="kube-system"))
    assert (n.a("k").kind, str(n.cpus("k"))) == (CPUKind.RESERVED, "0")
    n.rebuilt_moves_nobody()
    n.delete("a")
    n.create(ctr("d", pod="d", ns="kube-system", milli=500, cid="d"))
    assert n.a("d").kind is CPUKind.RESERVED


def test_rebuild_keeps_a_reserved_overflow_on_the_shared_cpus() -> None:
    """A reserved request that ran beyond the reserved capacity stays on the root's
    shared CPUs at a rebuild, even once the capacity it lacked has been freed: the
    live policy does not move it then, so a restart must not either (a Hypothesis
    example of the real-machine properties on server-2s-4n-2pmem-112t-isolated: it
    went to the reserved CPUs at the rebuild, an update without cause)."""
    n = Node()
    n.create(ctr("a", pod="a", ns="kube-system", milli=500, cid="a"))
    n.create(ctr("b", pod="b", ns="kube-system", milli=500, cid="b"))
    assert (n.a("b").kind, n.a("b").pool) == (CPUKind.SHARED, "root")
    n.rebuilt_moves_nobody()
    n.delete("a")  # b alone would fit the reserved capacity now
    n.rebuilt_moves_nobody()
    # ... and is still told apart from a reserved container reporting the reserved CPU,
    # whichever the runtime lists first
    n.create(ctr("c", pod="c", ns="kube-system", milli=500, cid="c"))
    assert n.a("c").kind is CPUKind.RESERVED
    n.live = dict(reversed(list(n.live.items())))
    n.rebuilt_moves_nobody()


def test_reserved_resources_test05() -> None:
    """n4c16/test05-reserved-resources, reserved cpuset:7,11 of available 4-7,8-13.

    Four 200m kube-system containers and a 100m one (twice, released in between) fit
    the 2000m of two reserved CPUs; a 2-CPU one does not and runs on every shared CPU.
    """
    config = {
        "availableResources": {"cpu": "cpuset:4-7,8-13"},
        "reservedResources": {"cpu": "cpuset:7,11"},
    }
    n = Node(config)
    reserved = IDSet.parse("7,11")
    n.create(*(ctr(f"p2c{i}", pod="pod2", ns="kube-system", milli=200, cid=f"p2c{i}")
               for i in range(4)))  # fmt: skip
    assert {n.cpus(f"p2c{i}") for i in range(4)} == {reserved}
    for pod in ("pod3", "pod4"):
        n.create(ctr(pod, pod=pod, ns="kube-system", milli=100, cid=pod))
        assert n.cpus(pod) == reserved
        n.delete(pod)
    n.create(ctr("pod5", pod="pod5", ns="kube-system", milli=2000, cid="pod5"))
    assert n.cpus("pod5") == IDSet.parse("4-13") - reserved
