"""n6-hbm-cxl/test04-nrt, its placements: two ``fullsocket`` balloons (one per package,
``shareIdleCPUsInSame: package``) with burstable containers, and the preserve annotations.

Their test reads the placements from NodeResourceTopology zones; the zones themselves
(names, ``excess cpus``, capacity and allocatable) are the NRT tests'.  The reserved CPU 3
is on package 0; their "4-7" is the package without it, "0-2" the rest of package 0, and
the checks say so.
"""

from __future__ import annotations

from nri_resmgr.topology.cpuset import IDSet
from tests.parity.balloons._sim import N6_HBM_CXL, Script, config, simulate

CONFIG = config("""
pinCPU: true
pinMemory: false
allocatorTopologyBalancing: true
reservedResources:
  cpu: cpuset:3
balloonTypes:
- name: fullsocket
  pinMemory: true
  maxCPUs: 4
  minCPUs: 1
  minBalloons: 2
  maxBalloons: 2
  shareIdleCPUsInSame: package
  namespaces: ["*"]
  showContainersInNrt: true
""")
RESERVED = 3


def test_nrt_placements() -> None:
    s = Script()
    pod0 = s.create(
        contcount=3, cpureq="750m", cpulim="", memreq="100M", memlim="500M",
        annotations={
            "cpu.preserve.resource-policy.nri.io/container.pod0c1": "true",
            "memory.preserve.resource-policy.nri.io/container.pod0c2": "true",
        },
    )  # fmt: skip
    pod1 = s.create(contcount=2, cpureq="200m", cpulim="1500m", memreq="100M", memlim="500M")
    run = simulate(s, CONFIG, topology=N6_HBM_CXL)

    topo = run.topology
    reserved_pkg = topo.cpus[RESERVED].package_id
    (free_pkg,) = {c.package_id for c in topo.cpus.values()} - {reserved_pkg}
    free = IDSet(c.id for c in topo.cpus.values() if c.package_id == free_pkg)
    beside_reserved = IDSet(
        c.id for c in topo.cpus.values() if c.package_id == reserved_pkg and c.id != RESERVED
    )
    (free_dram,) = {topo.cpus[c].node_id for c in free}

    p = run.at(pod0)
    # their "default/pod0/pod0c0" zone: cpuset 4-7 (balloon plus the package's idle
    # CPUs), memory set 1 (the package's DRAM: the type pins memory)
    assert p.cpus("pod0c0") == free
    assert p.mems("pod0c0") == IDSet({free_dram})
    # pod0c2 is in the same balloon, its memory preserved: their zone's memory set is
    # empty, no memory set is given to it (`Placement.mems` would read that as every node)
    assert p.cpus("pod0c2") == free
    assert p.step.containers["pod0/pod0c2"].mems == ""
    p = run.at(pod1)  # their fullsocket[1]: 0-2, the reserved CPU's package without it
    assert p.cpus("pod1c0") == beside_reserved
