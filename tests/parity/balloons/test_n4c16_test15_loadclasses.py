"""n4c16/test15-loadclasses: ``loadClasses`` keep balloons that load the same core or L2
cache apart, even when packing tightly.

Same cache override as test13's first configuration (L2 shared per NUMA node).  Their
NodeResourceTopology print is for debugging only.
"""

from __future__ import annotations

from nri_resmgr.topology.load import load_topology
from tests.parity.balloons._sim import (
    BALLOON,
    N4C16,
    Res,
    Script,
    config,
    res,
    simulate,
    with_l2_per_node,
)
from tests.parity.ports import port

CONFIG = config("""
showContainersInNrt: true
allocatorTopologyBalancing: false
reservedResources:
  cpu: 750m
pinCPU: true
pinMemory: true
balloonTypes:
- name: pre-reserved-avx
  minCPUs: 2
  maxCPUs: 4
  minBalloons: 2
  loads: [avx]
- name: noload
  maxCPUs: 1
- name: l2load
  loads: [membw]
  preferSpreadingPods: true
  preferNewBalloons: true
- name: l2htload
  loads: [membw, avx]
  preferSpreadingPods: true
  preferNewBalloons: true
loadClasses:
- name: avx
  level: core
  overloadsLevelInBalloon: true
- name: membw
  level: l2cache
""")


@port("balloons/n4c16/test15-loadclasses")
def test_loadclasses() -> None:
    s = Script()
    ann = {t: {BALLOON: t} for t in ("l2load", "noload", "l2htload", "pre-reserved-avx")}
    pod0 = s.create(contcount=2, annotations=ann["l2load"], cpureq="500m", cpulim="500m",
                    memreq="100M", memlim="")  # fmt: skip
    noload = Res(cpureq="1", cpulim="1", memreq="100M", memlim="")
    pod1 = s.create(annotations=ann["noload"], **noload)
    pod2 = s.create(annotations=ann["noload"], **noload)
    htload = Res(cpureq="100m", cpulim="200m", memreq="100M", memlim="")
    pod3 = s.create(annotations=ann["l2htload"], **htload)
    pod4 = s.create(annotations=ann["l2htload"], **htload)
    pod5 = s.create(contcount=2, annotations=ann["pre-reserved-avx"], **res("1", "100M"))
    pod6 = s.create(contcount=2, annotations=ann["pre-reserved-avx"], **res("2", "100M"))
    s.delete("pod0", "pod3", "pod4", "pod5", "pod6")
    pod7 = s.create(annotations=ann["l2htload"], cpureq="4", cpulim="", memreq="", memlim="")
    run = simulate(s, CONFIG, topology=with_l2_per_node(load_topology(N4C16)))

    # each container loads an L2 group of its own, on one package
    run.verify(
        pod0,
        'len(cpus["pod0c0"]) == 1',
        'len(cpus["pod0c1"]) == 1',
        'disjoint_sets(nodes["pod0c0"], nodes["pod0c1"])',
        'packages["pod0c0"] == packages["pod0c1"]',
    )
    run.verify(pod1, 'packages["pod1c0"] == packages["pod0c0"]')  # packed on that package
    run.verify(pod2, 'packages["pod2c0"] != packages["pod1c0"]')  # that package is full
    # packed next to the no-load pod2
    run.verify(pod3, 'len(cpus["pod3c0"]) == 1', 'nodes["pod3c0"] == nodes["pod2c0"]')
    # but not next to pod3: both load the L2 cache
    run.verify(
        pod4, 'len(cpus["pod4c0"]) == 1', 'disjoint_sets(nodes["pod3c0"], nodes["pod4c0"])'
    )
    # the pre-made avx balloon: no two threads of a core
    run.verify(
        pod5,
        'len(cores["pod5c0"]) == 2',
        'len(cpus["pod5c0"]) == 2',
        'cpus["pod5c0"] == cpus["pod5c1"]',
    )
    # the second pre-made avx balloon grows to 4, still one thread per core
    run.verify(
        pod6,
        'len(cores["pod6c0"]) == 4',
        'len(cpus["pod6c0"]) == 4',
        'cpus["pod6c0"] == cpus["pod6c1"]',
        'disjoint_sets(cores["pod6c0"], cores["pod5c0"])',
    )
    # the loads' virtual devices were freed and are made anew
    run.verify(pod7, 'len(cpus["pod7c0"]) == 4', 'len(cores["pod7c0"]) == 4')
