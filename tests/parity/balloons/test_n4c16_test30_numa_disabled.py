"""n4c16/test30-numa-disabled: the n4c16 VM booted with a kernel without NUMA.

Their kernel has no ``/sys/devices/system/node``; the closest our discovery reads is one
node holding every CPU and all memory (2 packages, 8 cores, 16 CPUs).  ``cpu7/cache/index2``
names the L2 cache of CPU 7, that is the core of CPU 7 ({6, 7}).
"""

from __future__ import annotations

from dataclasses import replace

from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.load import load_topology
from nri_resmgr.topology.model import Topology
from tests.parity.balloons._sim import BALLOON, N4C16, Script, config, simulate
from tests.parity.ports import port

CONFIG = config("""
balloonTypes:
  - name: single-thread-own-core
    minCPUs: 2
    maxCPUs: 2
    minBalloons: 1
    preferCloseToDevices:
    - /sys/devices/system/cpu/cpu7/cache/index2
  - name: default
    allocatorTopologyBalancing: true
    preferSpreadingPods: true
    minCPUs: 5
    minBalloons: 2
    showContainersInNrt: true
""")


def without_numa(topology: Topology) -> Topology:
    """`topology` with every CPU and all memory on node 0."""
    node0 = topology.nodes[0]
    memory = sum(n.memory_bytes for n in topology.nodes.values())
    return Topology(
        cpus={i: replace(c, node_id=0) for i, c in topology.cpus.items()},
        nodes={0: replace(node0, cpus=IDSet(topology.cpus), memory_bytes=memory,
                          distances=(10,))},
        source=f"{topology.source} without NUMA",
    )  # fmt: skip


@port("balloons/n4c16/test30-numa-disabled")
def test_numa_disabled() -> None:
    machine = without_numa(load_topology(N4C16))
    s = Script()  # their script sets no resources: run.sh's defaults
    pod0 = s.create(
        contcount=2,
        annotations={
            BALLOON: "single-thread-own-core",
            "hide-hyperthreads.resource-policy.nri.io": "true",
        },
    )
    pod1 = s.create(contcount=2)
    run = simulate(s, CONFIG, topology=machine)

    # one thread of the core of CPU 7
    run.verify(
        pod0,
        "len(set.union(cpus['pod0c0'], cpus['pod0c1'])) == 1",
        "len(set.union(cpus['pod0c0'], cpus['pod0c1']).intersection({'cpu06', 'cpu07'})) == 1",
    )
    # the two default balloons, 5 CPUs each, one per container
    run.verify(
        pod1,
        "cpus['pod1c0'].isdisjoint({'cpu06', 'cpu07'})",
        "cpus['pod1c1'].isdisjoint({'cpu06', 'cpu07'})",
        "len(cpus['pod1c0']) == 5",
        "len(cpus['pod1c1']) == 5",
        "disjoint_sets(cpus['pod1c0'], cpus['pod1c1'])",
    )
