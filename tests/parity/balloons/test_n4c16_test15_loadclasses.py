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
    disjoint,
    res,
    simulate,
    with_l2_per_node,
)

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

    p = run.at(pod0)  # each container loads an L2 group of its own, on one package
    assert len(p.cpus("pod0c0")) == len(p.cpus("pod0c1")) == 1
    assert disjoint(p.nodes("pod0c0"), p.nodes("pod0c1"))
    assert p.packages("pod0c0") == p.packages("pod0c1")
    p = run.at(pod1)  # packed tightly on the same package
    assert p.packages("pod1c0") == p.packages("pod0c0")
    p = run.at(pod2)  # that package is full
    assert p.packages("pod2c0") != p.packages("pod1c0")
    p = run.at(pod3)  # packed next to the no-load pod2
    assert len(p.cpus("pod3c0")) == 1
    assert p.nodes("pod3c0") == p.nodes("pod2c0")
    p = run.at(pod4)  # but not next to pod3: both load the L2 cache
    assert len(p.cpus("pod4c0")) == 1
    assert disjoint(p.nodes("pod3c0"), p.nodes("pod4c0"))
    p = run.at(pod5)  # the pre-made avx balloon: no two threads of a core
    assert (len(p.cores("pod5c0")), len(p.cpus("pod5c0"))) == (2, 2)
    assert p.cpus("pod5c0") == p.cpus("pod5c1")
    p = run.at(pod6)  # the second pre-made avx balloon grows to 4, still one thread per core
    assert (len(p.cores("pod6c0")), len(p.cpus("pod6c0"))) == (4, 4)
    assert p.cpus("pod6c0") == p.cpus("pod6c1")
    assert disjoint(p.cores("pod6c0"), p.cores("pod5c0"))
    p = run.at(pod7)  # the loads' virtual devices were freed and are made anew
    assert (len(p.cpus("pod7c0")), len(p.cores("pod7c0"))) == (4, 4)
