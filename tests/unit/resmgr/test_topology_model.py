"""The pure topology model: queries on hand-built machines, consistency checks."""

from __future__ import annotations

import copy

import pytest

from nri_resmgr.model import MemoryKind
from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.model import CPU, NumaNode, Topology, TopologyError
from nri_resmgr.topology.synthetic import build_topology


def _cpu(cid: int, *, pkg: int = 0, die: int = 0, node: int = 0, core: int | None = None,
         l3: int = 0, online: bool = True, isolated: bool = False) -> CPU:
    core_id = cid if core is None else core
    return CPU(id=cid, package_id=pkg, die_id=die, node_id=node, core_id=core_id,
               l2_id=core_id, l3_id=l3, online=online, isolated=isolated)


def _machine() -> Topology:
    """1 package, 2 dies; die 0 = node 0 (cores 0,1 x2 threads), die 1 = node 1 (core 2),
    plus CPU-less node 2 (pmem, nearest node 1) and node 3 (hbm, nearest node 0);
    cpu 5 is offline, cpu 1 isolated."""
    cpus = [
        _cpu(0, core=0), _cpu(3, core=0),
        _cpu(1, core=1, isolated=True), _cpu(4, core=1),
        _cpu(2, die=1, node=1, core=2, l3=1), _cpu(5, die=1, node=1, core=2, l3=1, online=False),
    ]
    dist = ((10, 12, 30, 13), (12, 10, 17, 25), (30, 17, 10, 40), (13, 25, 40, 10))
    nodes = [
        NumaNode(0, IDSet([0, 1, 3, 4]), 4 << 30, MemoryKind.DRAM, dist[0]),
        NumaNode(1, IDSet([2, 5]), 4 << 30, MemoryKind.DRAM, dist[1]),
        NumaNode(2, IDSet(), 16 << 30, MemoryKind.PMEM, dist[2]),
        NumaNode(3, IDSet(), 1 << 30, MemoryKind.HBM, dist[3]),
    ]
    return Topology(cpus={c.id: c for c in cpus}, nodes={n.id: n for n in nodes}, source="test")


def test_cpu_queries() -> None:
    t = _machine()
    assert t.online_cpus() == IDSet.parse("0-4")
    assert t.offline_cpus() == IDSet([5])
    assert t.isolated_cpus() == IDSet([1])
    assert t.core_ids() == [0, 1, 2]
    assert t.core_cpus(0) == IDSet([0, 3])
    assert t.core_cpus(2) == IDSet([2])  # the offline sibling does not count
    assert t.siblings(4) == IDSet([1, 4])
    assert t.cores_of(IDSet([0, 1, 3, 5])) == {0: IDSet([0, 3]), 1: IDSet([1])}
    assert t.threads_per_core() == 2


def test_tree_queries() -> None:
    t = _machine()
    assert t.package_ids() == [0]
    assert t.package_cpus(0) == IDSet.parse("0-4")
    assert t.die_ids() == [0, 1]
    assert t.die_ids(0) == [0, 1]
    assert t.die_cpus(1) == IDSet([2])
    assert t.die_nodes(0) == IDSet([0])
    assert t.package_nodes(0) == IDSet([0, 1])
    assert t.l3_ids() == [0, 1]
    assert t.l3_ids(die=1) == [1]
    assert t.l3_cpus(0) == IDSet([0, 1, 3, 4])
    assert t.l3_nodes(1) == IDSet([1])
    assert t.node_ids() == [0, 1, 2, 3]
    assert t.node_ids(with_cpus=True) == [0, 1]
    assert t.node_ids(with_cpus=False) == [2, 3]
    assert t.node_cpus(1) == IDSet([2])
    assert t.node_cpus(2) == IDSet()
    assert t.nodes_of(IDSet([0, 2])) == IDSet([0, 1])
    assert t.node_memory([0, 2]) == 20 << 30


def test_memory_attachment() -> None:
    t = _machine()
    assert t.distance(0, 3) == 13 and t.distance(3, 0) == 13
    assert t.closest_cpu_node(0) == 0
    assert t.closest_cpu_node(2) == 1
    assert t.closest_cpu_node(3) == 0
    kinds = [MemoryKind.DRAM, MemoryKind.PMEM, MemoryKind.HBM]
    assert t.memory_nodes_near(0, kinds) == IDSet([0, 3])
    assert t.memory_nodes_near(1, kinds) == IDSet([1, 2])
    assert t.memory_nodes_near(1, [MemoryKind.PMEM]) == IDSet([2])
    assert t.memory_nodes_near(0, [MemoryKind.PMEM]) == IDSet()
    assert t.nodes_of_kind(MemoryKind.HBM) == IDSet([3])


def test_closest_cpu_node_ties_go_to_lower_id() -> None:
    t = build_topology(
        {"packages": 2, "nodes": 1, "cores": 1, "threads": 1,
         "extra_memory_nodes": [{"kind": "pmem", "memory": "1G", "attach": 1}]}
    )
    assert t.closest_cpu_node(2) == 1
    equal = {
        n.id: NumaNode(n.id, n.cpus, n.memory_bytes, n.kind,
                       (10, 21, 20) if n.id == 0 else (21, 10, 20) if n.id == 1 else (20, 20, 10))
        for n in t.nodes.values()
    }
    tied = Topology(cpus=t.cpus, nodes=equal)
    assert tied.closest_cpu_node(2) == 0


def test_without_distance_table() -> None:
    t = Topology(
        cpus={0: _cpu(0), 1: _cpu(1, node=1)},
        nodes={0: NumaNode(0, IDSet([0]), 0), 1: NumaNode(1, IDSet([1]), 0)},
    )
    assert t.distance(0, 0) == 10 and t.distance(0, 1) == 20


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda t: t.package_cpus(7), r"topology test: no package 7; expected one of 0"),
        (lambda t: t.die_cpus(9), r"no die 9; expected one of 0-1"),
        (lambda t: t.core_cpus(42), r"no core 42"),
        (lambda t: t.l3_cpus(5), r"no L3 cache 5"),
        (lambda t: t.node_cpus(8), r"no node 8; expected one of 0-3"),
        (lambda t: t.siblings(99), r"no cpu 99; expected one of 0-5"),
        (lambda t: t.distance(0, 6), r"no node 6"),
    ],
)
def test_unknown_ids_are_named(call: object, message: str) -> None:
    with pytest.raises(TopologyError, match=message):
        call(_machine())  # type: ignore[operator]


def test_inconsistent_topologies_are_refused() -> None:
    with pytest.raises(TopologyError, match=r"cpu 0 is on node 3; expected one of nodes \[0\]"):
        Topology(cpus={0: _cpu(0, node=3)}, nodes={0: NumaNode(0, IDSet([0]), 0)})
    with pytest.raises(TopologyError, match=r"cpus\[1\] holds the record of cpu 0"):
        Topology(cpus={1: _cpu(0)}, nodes={0: NumaNode(0, IDSet([0]), 0)})
    with pytest.raises(TopologyError, match=r"node 0 has 2 distances; expected 1"):
        Topology(cpus={0: _cpu(0)}, nodes={0: NumaNode(0, IDSet([0]), 0, distances=(10, 20))})


def test_immutable_and_equal_by_value() -> None:
    a, b = _machine(), _machine()
    assert a == b
    with pytest.raises(AttributeError):
        a.source = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        a.cpus[9] = _cpu(9)  # type: ignore[index]
    other = Topology(cpus=a.cpus, nodes=a.nodes, source="elsewhere")
    assert other == a  # where it came from is not part of the value


def test_copies_are_the_value_itself() -> None:
    """States that hold a topology can be deep-copied; the immutable topology is shared."""
    t = build_topology({"packages": 2, "nodes": 2, "cores": 2, "isolated": "1"})
    state = {"topology": t, "grants": [1, 2]}
    clone = copy.deepcopy(state)
    assert clone["topology"] is t and clone["grants"] is not state["grants"]
    assert copy.copy(t) is t
