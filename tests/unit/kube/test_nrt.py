"""The NodeResourceTopology of each simulated step: NUMA zones whose `available` is what
the containers' cpusets and memory pinning leave free, the alignment attributes, the
pods fingerprint, and the topology-aware pool zones nri-plugins' test04-nrt reads."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import pytest
import structlog

from nri_resmgr.kube.fingerprint import pods_fingerprint
from nri_resmgr.kube.nrt import Alignment, Holding, NodeUse, numa_zones, quantity
from nri_resmgr.simulator.results import SimulationResult, StepResult, render_json, render_table
from nri_resmgr.simulator.run import run_scenario
from nri_resmgr.simulator.scenario import load_scenario
from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.load import load_topology
from nri_resmgr.topology.model import Topology
from nri_resmgr.topology.synthetic import build_topology

QUIET = structlog.wrap_logger(structlog.ReturnLogger())
GIB = 1 << 30
#: 2 packages x 1 NUMA node x 2 cores x 2 threads: node 0 = CPUs 0-3, node 1 = 4-7
TWO_NODES: dict[str, Any] = {
    "packages": 2, "nodes": 1, "cores": 2, "threads": 2, "memory": "4G", "numbering": "qemu",
}  # fmt: skip


def pod(name: str, cpu: str | None, memory: str | None = None, **extra: Any) -> dict[str, Any]:
    res = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    return {"create": {"pod": name, "containers": [{"name": "c", "requests": res,
                                                   "limits": res}], **extra}}  # fmt: skip


def delete(name: str) -> dict[str, Any]:
    return {"delete": {"pod": name}}


def run(
    steps: Sequence[Mapping[str, Any]],
    *,
    policy: str = "topology-aware",
    config: Mapping[str, Any] | None = None,
    topology: Mapping[str, Any] = TWO_NODES,
) -> SimulationResult:
    scenario = load_scenario(
        {
            "topology": dict(topology),
            "policy": policy,
            "config": dict(config or {}),
            "steps": list(steps),
        }
    )
    result = run_scenario(scenario, log=QUIET)
    for s in result.steps:
        assert s.errors == (), s.errors
    return result


def zones(step: StepResult) -> dict[str, dict[str, Any]]:
    return {z["name"]: z for z in step.nrt["zones"]}


def res(zone: Mapping[str, Any], name: str) -> tuple[str, str, str]:
    (r,) = [r for r in zone["resources"] if r["name"] == name]
    return r["capacity"], r["allocatable"], r["available"]


def attrs(obj: Mapping[str, Any]) -> dict[str, str]:
    return {a["name"]: a["value"] for a in obj["attributes"]}


def free_by_cpusets(topo: Topology, step: StepResult, grantable: IDSet) -> dict[str, int]:
    """Per NUMA zone, the grantable CPUs no exclusive container's cpuset holds."""
    held = IDSet()
    for c in step.containers.values():
        if c.kind in ("exclusive", "isolated"):
            held = held | IDSet.parse(c.cpus)
    return {
        f"node-{n}": len((topo.nodes[n].cpus & grantable) - held)
        for n in topo.node_ids(with_cpus=True)
    }


WORKLOAD = [
    pod("g2", "2", "1G"),
    pod("b", "500m"),
    pod("g1", "1", "512M"),
    pod("g3", "3", "1G"),
    delete("g2"),
    pod("g2b", "2", "256M"),
    delete("g3"),
    delete("g1"),
    delete("g2b"),
]


@pytest.mark.parametrize(
    ("policy", "config", "reserved"),
    [
        pytest.param("topology-aware", {"reservedResources": {"cpu": "cpuset:0"}}, IDSet({0}),
                     id="topology-aware"),
        pytest.param("static", {"reservedSystemCPUs": "0"}, IDSet({0}), id="static"),
    ],
)  # fmt: skip
def test_available_cpus_are_what_the_cpusets_leave_free_after_every_step(
    policy: str, config: dict[str, Any], reserved: IDSet
) -> None:
    result = run(WORKLOAD, policy=policy, config=config)
    topo = build_topology(TWO_NODES)
    grantable = topo.online_cpus() - reserved
    seen_taken = False
    for step in result.steps:
        want = free_by_cpusets(topo, step, grantable)
        got = {name: int(res(z, "cpu")[2]) for name, z in zones(step).items() if name in want}
        assert got == want, (step.step, step.op, step.pod)
        seen_taken |= want != {"node-0": 3, "node-1": 4}
    assert seen_taken  # the workload did hold CPUs exclusively
    last = zones(result.steps[-1])
    assert res(last["node-0"], "cpu") == ("4", "3", "3")  # CPU 0 reserved
    assert res(last["node-1"], "cpu") == ("4", "4", "4")  # everything returned


def test_pinned_memory_is_taken_from_its_node_and_given_back() -> None:
    result = run([pod("g", "2", "1G"), pod("b", "500m"), delete("g")])
    first, second, third = result.steps
    (node,) = IDSet.parse(first.containers["g/c"].mems)
    assert res(zones(first)[f"node-{node}"], "memory") == (
        str(4 * GIB),
        str(4 * GIB),
        str(4 * GIB - 10**9),
    )
    other = f"node-{1 - node}"
    assert res(zones(first)[other], "memory")[2] == str(4 * GIB)
    # a BestEffort/Burstable container without a memory request pins nothing
    assert zones(second)[f"node-{node}"] == zones(first)[f"node-{node}"]
    assert res(zones(third)[f"node-{node}"], "memory")[2] == str(4 * GIB)


def test_alignment_and_fingerprint_attributes() -> None:
    ta = run([pod("a", "1"), pod("b", "1", namespace="prod"), delete("a")])
    a0, a1, a2 = (attrs(s.nrt) for s in ta.steps)
    assert (a0["topologyManagerPolicy"], a0["topologyManagerScope"]) == ("best-effort", "container")
    assert ta.steps[0].nrt["topologyPolicies"] == ["BestEffortContainerLevel"]
    assert a0["nodeTopologyPodsFingerprint"] == pods_fingerprint([("default", "a")])
    assert a1["nodeTopologyPodsFingerprint"] == pods_fingerprint([("prod", "b"), ("default", "a")])
    assert a2["nodeTopologyPodsFingerprint"] == pods_fingerprint([("prod", "b")])
    assert a0["nodeTopologyPodsFingerprintMethod"] == "all"
    unpinned = run([pod("a", "1")], config={"pinCPU": False})
    assert attrs(unpinned.steps[0].nrt)["topologyManagerPolicy"] == "none"
    static = run([pod("a", "1")], policy="static")
    assert attrs(static.steps[0].nrt)["topologyManagerPolicy"] == "none"


def test_mixed_container_counts_only_its_whole_cpus() -> None:
    result = run([pod("m", "1500m", "100M")])
    (step,) = result.steps
    report = step.containers["m/c"]
    assert report.kind == "mixed"
    taken = sum(
        int(res(z, "cpu")[1]) - int(res(z, "cpu")[2])
        for z in zones(step).values()
        if z["type"] == "Node"
    )
    assert taken == 1  # one whole CPU exclusive; the 500m share is on shared CPUs


def test_topology_aware_pool_zones_as_their_test04_nrt_reads_them() -> None:
    """Their n6-hbm-cxl/test04-nrt: ``reservedResources.cpu: cpuset:3``, no pods."""
    from tests.parity.machines import N6_HBM_CXL, helm_config

    config = helm_config(reservedResources={"cpu": "cpuset:3"})
    result = run([pod("p", None)], config=config, topology=N6_HBM_CXL)
    z = zones(result.steps[0])
    want = {
        ("socket #0", "memory set"): "0,2,4",
        ("socket #0", "shared cpuset"): "0-2",
        ("socket #0", "reserved cpuset"): "3",
        ("socket #1", "memory set"): "1,3,5",
        ("socket #1", "shared cpuset"): "4-7",
        ("root", "memory set"): "0-5",
        ("root", "shared cpuset"): "0-2,4-7",
        ("root", "reserved cpuset"): "3",
    }
    for (zone, attr), value in want.items():
        assert attrs(z[zone])[attr] == value, (zone, attr)
    assert "reserved cpuset" not in attrs(z["socket #1"])
    assert z["socket #0"]["parent"] == "root" and "parent" not in z["root"]
    assert (z["socket #0"]["type"], z["root"]["type"]) == ("socket", "virtual node")


def test_an_exclusive_grant_shrinks_its_pool_zone_shared_cpuset() -> None:
    from tests.parity.machines import N6_HBM_CXL, helm_config

    config = helm_config(reservedResources={"cpu": "cpuset:3"})
    result = run([pod("g", "2", "100M")], config=config, topology=N6_HBM_CXL)
    step = result.steps[0]
    cpus = IDSet.parse(step.containers["g/c"].cpus)
    root = zones(step)["root"]
    assert IDSet.parse(attrs(root)["shared cpuset"]) == IDSet({0, 1, 2, 4, 5, 6, 7}) - cpus
    assert res(root, "cpu") == ("8", "8", "5")


def test_simulator_outputs_carry_the_nrt() -> None:
    result = run([pod("g", "2", "1G")])
    doc = render_json(result)
    assert '"nrt"' in doc and '"topologyManagerPolicy"' in doc
    text = render_table(result)
    assert "nrt: topologyManagerPolicy=best-effort topologyManagerScope=container" in text
    assert "nrt node-0: available/allocatable cpu" in text


def _use(topo: Topology, *holdings: Holding) -> NodeUse:
    return NodeUse(policy="x", allowed=topo.online_cpus(), reserved=IDSet(), holdings=holdings)


def test_numa_zones_hugepages_and_split_memory() -> None:
    from tests.parity.machines import N6_HBM_CXL

    topo = load_topology(dict(N6_HBM_CXL))
    nodes = dict(topo.nodes)
    nodes[0] = replace(nodes[0], hugepages={2048: 4, 1048576: 1})
    topo = Topology(cpus=topo.cpus, nodes=nodes)
    # 3 GiB + 1 byte over DRAM node 0 (2 GiB) and PMEM node 4 (4 GiB): a third and two
    # thirds, the odd byte on the lowest
    z = {
        zz["name"]: zz
        for zz in numa_zones(
            topo, _use(topo, Holding("ns", "p", "c", IDSet({1}), IDSet({0, 4}), 3 * GIB + 1))
        )
    }
    assert res(z["node-0"], "hugepages-2Mi") == (str(8 << 20),) * 3
    assert res(z["node-0"], "hugepages-1Gi") == (str(GIB),) * 3
    assert "hugepages-2Mi" not in {r["name"] for r in z["node-1"]["resources"]}
    assert res(z["node-0"], "memory")[2] == str(2 * GIB - (GIB + 1))
    assert res(z["node-4"], "memory")[2] == str(4 * GIB - 2 * GIB)
    assert res(z["node-1"], "memory")[2] == str(2 * GIB)
    assert res(z["node-0"], "cpu") == ("4", "4", "3")
    # memory free to use every node is not pinned anywhere
    every = IDSet(topo.nodes)
    z = {
        zz["name"]: zz
        for zz in numa_zones(topo, _use(topo, Holding("ns", "p", "c", IDSet(), every, GIB)))
    }
    assert all(res(zz, "memory")[1] == res(zz, "memory")[2] for zz in z.values())


def test_pinned_memory_beyond_a_node_reports_zero_not_negative() -> None:
    topo = load_topology(dict(TWO_NODES))
    z = {
        zz["name"]: zz
        for zz in numa_zones(
            topo, _use(topo, Holding("ns", "p", "c", IDSet(), IDSet({1}), 5 * GIB))
        )
    }
    assert res(z["node-1"], "memory")[2] == "0"


@pytest.mark.parametrize(
    ("policy", "scope", "message"),
    [
        pytest.param("strict", "pod", "topology manager policy: expected one of none", id="policy"),
        pytest.param("none", "node", "topology manager scope: expected one of container",
                     id="scope"),
    ],
)  # fmt: skip
def test_alignment_refuses_values_a_scheduler_does_not_know(
    policy: str, scope: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        Alignment(policy, scope)


@pytest.mark.parametrize(("milli", "text"), [(0, "0"), (2000, "2"), (1500, "1500m"), (750, "750m")])
def test_quantity(milli: int, text: str) -> None:
    assert quantity(milli) == text
