"""n4c16/test16-composite-balloons: balloons made of balloons (``components``,
``componentCreation``), kept balanced over NUMA nodes.

Their checks count a container's CPUs per NUMA node by CPU id ranges (cpu00-03 is node0);
here they count by node, which is what the ranges stand for.  "cpu06 or cpu07" (their
reserved core, close to cpu6's L1 cache) is the core
of CPU 6 here.  Their ``verify-nrt`` reads the balloon's zone of the NodeResourceTopology
report; here the same zone is built from the step's balloons.
"""

from __future__ import annotations

from nri_resmgr.kube.report import balloon_zones
from nri_resmgr.ops.metrics import StateSnapshot
from tests.parity.balloons._sim import BALLOON, Placement, Res, Script, config, simulate
from tests.parity.ports import port

CONFIG = config("""
allocatorTopologyBalancing: false
reservedResources:
  cpu: 750m
pinCPU: true
pinMemory: true
balloonTypes:
- name: node0
  preferCloseToDevices: [/sys/devices/system/node/node0]
- name: node1
  preferCloseToDevices: [/sys/devices/system/node/node1]
- name: node2
  preferCloseToDevices: [/sys/devices/system/node/node2]
- name: node3
  preferCloseToDevices: [/sys/devices/system/node/node3]
- name: balance-all-nodes
  components:
  - balloonType: balance-pkg0-nodes
  - balloonType: balance-pkg1-nodes
  minCPUs: 4
  minBalloons: 1
  showContainersInNrt: true
- name: balance-pkg0-nodes
  components:
  - balloonType: node0
  - balloonType: node1
- name: balance-pkg1-nodes
  componentCreation: "all"
  components:
  - balloonType: node2
  - balloonType: node3
  preferNewBalloons: true
- name: nodes2301
  componentCreation: balance-balloons
  components:
  - balloonType: node2
  - balloonType: node3
  - balloonType: node0
  - balloonType: node1
  preferNewBalloons: true
- name: balance-both-nodes-on-either-pkg
  componentCreation: balance-balloons
  components:
  - balloonType: balance-pkg0-nodes
  - balloonType: balance-pkg1-nodes
  preferNewBalloons: true
- name: new-on-node-1
  components:
  - balloonType: node1
  preferNewBalloons: true
- name: kube-system-cpu-core
  preferCloseToDevices: [/sys/devices/system/cpu/cpu6/cache/index0]
- name: reserved
  components:
  - balloonType: kube-system-cpu-core
""")


def nrt_attribute(p: Placement, zone: str, name: str) -> str:
    """Their ``verify-nrt``: an attribute of a zone of the NodeResourceTopology report."""
    zones = balloon_zones(StateSnapshot(balloons=p.step.balloons))
    (z,) = [z for z in zones if z["name"] == zone]
    values = [a["value"] for a in z["attributes"] if a["name"] == name]
    assert len(values) == 1, (zone, name, z["attributes"])
    return str(values[0])


def burstable(cpu: str) -> Res:
    """Their ``CPUREQ=cpu MEMREQ="100M" CPULIM="" MEMLIM=""``: requests only."""
    return Res(cpureq=cpu, cpulim="", memreq="100M", memlim="")


@port("balloons/n4c16/test16-composite-balloons")
def test_composite_balloons() -> None:
    s = Script()
    all_nodes = {BALLOON: "balance-all-nodes"}
    pkg1 = {BALLOON: "balance-pkg1-nodes"}
    pod0 = s.create(
        contcount=2,
        annotations=all_nodes,
        **Res(cpureq="500m", cpulim="500m", memreq="100M", memlim=""),
    )
    pod1 = s.create(annotations=all_nodes, **burstable("9"))
    pod2 = s.create(
        namespace="kube-system", **Res(cpureq="100m", cpulim="100m", memreq="", memlim="")
    )
    shrunk = s.delete("pod1")
    s.delete("pod0", "pod2")
    pod3 = s.create(annotations=pkg1, **burstable("1"))
    pod4 = s.create(annotations=pkg1, **burstable("4"))
    s.delete("pod3", "pod4")
    pod5 = s.create(annotations=all_nodes, **burstable("12"))
    run = simulate(s, CONFIG)

    run.verify(
        pod0,
        'len(cpus["pod0c0"]) == 4',
        'len(cpus["pod0c1"]) == 4',
        'nodes["pod0c0"] == nodes["pod0c1"] == {"node0", "node1", "node2", "node3"}',
    )
    # their verify-nrt of the balloon's zone
    assert nrt_attribute(run.at(pod0), "balance-all-nodes[0]", "excess cpus") == "3000m"
    # 9 CPUs balanced: 3 per node (the reserved CPU is on node1)
    run.verify(
        pod1,
        'len(cpus["pod1c0"]) == 12',
        'cpus["pod0c0"] == cpus["pod0c1"] == cpus["pod1c0"]',
        'len(set.intersection(cpus["pod1c0"], {"cpu00", "cpu01", "cpu02", "cpu03"})) == 3',
        'len(set.intersection(cpus["pod1c0"], {"cpu04", "cpu05", "cpu06", "cpu07"})) == 3',
        'len(set.intersection(cpus["pod1c0"], {"cpu08", "cpu09", "cpu10", "cpu11"})) == 3',
        'len(set.intersection(cpus["pod1c0"], {"cpu12", "cpu13", "cpu14", "cpu15"})) == 3',
        'len(set.intersection(cpus["pod1c0"], {"cpu06", "cpu07"})) == 1',
    )
    # kube-system on the core of cpu6
    run.verify(pod2, 'cpus["pod2c0"].issubset({"cpu06", "cpu07"})')
    # back to 4 CPUs, still one per node
    run.verify(
        shrunk,
        'len(cpus["pod0c0"]) == 4',
        'cpus["pod0c0"] == cpus["pod0c1"]',
        'len(set.intersection(cpus["pod0c0"], {"cpu00", "cpu01", "cpu02", "cpu03"})) == 1',
        'len(set.intersection(cpus["pod0c0"], {"cpu04", "cpu05", "cpu06", "cpu07"})) == 1',
        'len(set.intersection(cpus["pod0c0"], {"cpu08", "cpu09", "cpu10", "cpu11"})) == 1',
        'len(set.intersection(cpus["pod0c0"], {"cpu12", "cpu13", "cpu14", "cpu15"})) == 1',
    )
    # a balance-pkg1-nodes instance: one CPU on each of nodes 2 and 3
    run.verify(
        pod3,
        'len(cpus["pod3c0"]) == 2',
        'len(set.intersection(cpus["pod3c0"], {"cpu08", "cpu09", "cpu10", "cpu11"})) == 1',
        'len(set.intersection(cpus["pod3c0"], {"cpu12", "cpu13", "cpu14", "cpu15"})) == 1',
    )
    run.verify(
        pod4,
        'len(cpus["pod4c0"]) == 4',
        'len(set.intersection(cpus["pod4c0"], {"cpu08", "cpu09", "cpu10", "cpu11"})) == 2',
        'len(set.intersection(cpus["pod4c0"], {"cpu12", "cpu13", "cpu14", "cpu15"})) == 2',
        'disjoint_sets(cpus["pod4c0"], cpus["pod3c0"])',
    )
    # the pkg1 composites were deleted whole: balance-all-nodes can grow
    run.verify(
        pod5,
        'len(cpus["pod5c0"]) == 12',
        'len(set.intersection(cpus["pod5c0"], {"cpu00", "cpu01", "cpu02", "cpu03"})) == 3',
        'len(set.intersection(cpus["pod5c0"], {"cpu04", "cpu05", "cpu06", "cpu07"})) == 3',
        'len(set.intersection(cpus["pod5c0"], {"cpu08", "cpu09", "cpu10", "cpu11"})) == 3',
        'len(set.intersection(cpus["pod5c0"], {"cpu12", "cpu13", "cpu14", "cpu15"})) == 3',
    )


@port("balloons/n4c16/test16-composite-balloons")
def test_component_creation_order() -> None:
    s = Script()
    order = {BALLOON: "nodes2301"}
    g = burstable("1")
    steps = [s.create(annotations=order, **g) for _ in range(4)]  # pod0..pod3
    s.delete("pod1")  # it ran in balloon "node3"
    pod4 = s.create(annotations=order, **g)
    s.delete("pod0", "pod2", "pod3", "pod4")
    pod5 = s.create(annotations={BALLOON: "new-on-node-1"}, **g)
    either = {BALLOON: "balance-both-nodes-on-either-pkg"}
    pod6 = s.create(annotations=either, **g)
    pod7 = s.create(annotations=either, **g)
    pod8 = s.create(annotations=either, **g)
    run = simulate(s, CONFIG)

    run.verify(steps[0], 'nodes["pod0c0"] == {"node2"}')
    run.verify(steps[1], 'nodes["pod1c0"] == {"node3"}')
    run.verify(steps[2], 'nodes["pod2c0"] == {"node0"}')
    run.verify(steps[3], 'nodes["pod3c0"] == {"node1"}')
    run.verify(pod4, 'nodes["pod4c0"] == {"node3"}')
    run.verify(pod5, 'nodes["pod5c0"] == {"node1"}')
    # node1 has an instance (pod5's): balance-balloons picks the pkg1 component first
    run.verify(pod6, 'nodes["pod6c0"] == {"node2", "node3"}')
    run.verify(pod7, 'nodes["pod7c0"] == {"node0", "node1"}')
    run.verify(pod8, 'nodes["pod8c0"] == {"node2", "node3"}')
