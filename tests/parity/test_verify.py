"""The verify helper names what a container may use the way nri-plugins' e2e does."""

from __future__ import annotations

from nri_resmgr.simulator.results import ContainerReport
from nri_resmgr.topology.synthetic import build_topology
from tests.parity.machines import N4C16, N6_HBM_CXL, S8C4K
from tests.parity.suite import Suite
from tests.parity.verify import (
    allowed,
    core_ids,
    cpu_ids,
    die_ids,
    disjoint_sets,
    node_ids,
    package_ids,
)


def _row(cpus: str, mems: str) -> ContainerReport:
    return ContainerReport(cpus, mems, "exclusive", "node1", None, None)


def test_names_are_padded_and_follow_qemu_ids() -> None:
    topo = build_topology(N4C16)
    v = allowed(topo, {"pod0/pod0c0": _row("5-6", "1"), "pod1/pod1c0": _row("", "")})
    assert v.cpus["pod0c0"] == {"cpu05", "cpu06"}
    assert v.cores["pod0c0"] == {"node1/core2", "node1/core3"}
    assert v.threads["pod0c0"] == {"node1/core2/thread1", "node1/core3/thread0"}
    assert v.nodes["pod0c0"] == {"node1"} and v.mems["pod0c0"] == {"node1"}
    assert v.packages["pod0c0"] == {"package0"} and v.dies["pod0c0"] == {"package0/die0"}
    # no cpuset or memset: everything, as an unpinned process on the VM
    assert len(v.cpus["pod1c0"]) == 16 and v.mems["pod1c0"] == {f"node{n}" for n in range(4)}
    assert cpu_ids(v.cpus["pod0c0"]) == {5, 6}
    assert core_ids(v.cores["pod0c0"]) == {(1, 2), (1, 3)}
    assert die_ids(v.dies["pod0c0"]) == {(0, 0)}
    assert node_ids(v.nodes["pod0c0"]) == {1} and package_ids(v.packages["pod1c0"]) == {0, 1}
    assert disjoint_sets({"a"}, {"b"}, {"c"}) and not disjoint_sets({"a"}, {"b"}, {"a"})


def test_memory_nodes_and_wide_ids() -> None:
    v = allowed(build_topology(N6_HBM_CXL), {"p/pod0c0": _row("0-1", "0,2,4")})
    assert v.mems["pod0c0"] == {"node0", "node2", "node4"}
    big = allowed(build_topology(S8C4K), {"p/pod0c0": _row("2,4095", "")})
    assert big.cpus["pod0c0"] == {"cpu0002", "cpu4095"}
    assert big.packages["pod0c0"] == {"package0", "package7"}


def test_suite_names_pods_like_their_create() -> None:
    suite = Suite(N4C16, {"reservedResources": {"cpu": "750m"}})
    assert suite.create("guaranteed", CPU="2", CONTCOUNT=2) == ["pod0"]
    assert suite.create("burstable", n=2, CPULIM="0") == ["pod1", "pod2"]
    assert suite.create("besteffort") == ["pod3"]
    suite.delete("pod1")
    v = suite.verify()
    assert set(v.cpus) == {"pod0c0", "pod0c1", "pod2c0", "pod3c0"}
    assert v.errors == ()
    assert len(v.cpus["pod0c0"]) == 2 and disjoint_sets(v.cpus["pod0c0"], v.cpus["pod0c1"])
    b = suite.steps[1]["create"]["containers"][0]
    assert b["limits"] == {"memory": "200M"} and b["requests"] == {"cpu": "1", "memory": "100M"}
