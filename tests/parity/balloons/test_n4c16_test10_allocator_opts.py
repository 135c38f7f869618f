"""n4c16/test10-allocator-opts: allocatorTopologyBalancing, preferSpreadOnPhysicalCores and
preferCloseToDevices (a NUMA node) per balloon type and policy-wide."""

from __future__ import annotations

from tests.parity.balloons._sim import BALLOON, Script, config, res, simulate
from tests.parity.ports import port

CONFIG = config("""
reservedResources:
  cpu: "1"
allocatorTopologyBalancing: true
preferSpreadOnPhysicalCores: true
balloonTypes:
  - name: policydefaults
    minCPUs: 2
    minBalloons: 2
  - name: topo1cores0
    minCPUs: 2
    minBalloons: 1
    preferSpreadOnPhysicalCores: false
  - name: topo0cores1
    allocatorTopologyBalancing: false
    preferSpreadOnPhysicalCores: true
  - name: topo0cores0
    allocatorTopologyBalancing: false
    preferSpreadOnPhysicalCores: false
  - name: topo1cores1
    allocatorTopologyBalancing: true
    preferSpreadOnPhysicalCores: true
  - name: device-node2
    preferNewBalloons: true
    preferSpreadOnPhysicalCores: true
    preferCloseToDevices:
      - "/sys/devices/system/node/node2"
""")


@port("balloons/n4c16/test10-allocator-opts")
def test_allocator_opts() -> None:
    s = Script()
    g = res("100m", "100M")
    pod0 = s.create(annotations={BALLOON: "policydefaults"}, **g)
    pod1 = s.create(annotations={BALLOON: "topo1cores0"}, **g)
    pod2 = s.create(contcount=2, annotations={BALLOON: "topo1cores1"}, **res("1", "100M"))
    s.delete("pod0", "pod1", "pod2")
    pod3 = s.create(contcount=2, annotations={BALLOON: "topo0cores0"}, **res("1", "100M"))
    near = {BALLOON: "device-node2"}
    pod4 = s.create(annotations=near, cpureq="3", cpulim="6", memreq="100M", memlim="100M")
    # their script deletes pod0-pod2 again here (already gone); pod3 and pod4 stay
    pod5 = s.create(annotations=near, cpureq="2", cpulim="6", memreq="100M", memlim="100M")
    run = simulate(s, CONFIG)

    # spread on physical cores, away from node2
    run.verify(
        pod0,
        'len(cores["pod0c0"]) == 2',
        'len(cpus["pod0c0"]) == 2',
        '"node2" not in nodes["pod0c0"]',
    )
    # packed on one core
    run.verify(
        pod1,
        'len(cores["pod1c0"]) == 1',
        'len(cpus["pod1c0"]) == 2',
        '"node2" not in nodes["pod1c0"]',
    )
    run.verify(
        pod2,
        'len(cores["pod2c0"]) == 2',
        'len(cpus["pod2c0"]) == 2',
        'cpus["pod2c0"] == cpus["pod2c1"]',
        '"node2" not in nodes["pod2c0"]',
    )
    # packed tightly
    run.verify(
        pod3,
        'len(cores["pod3c0"]) == 1',
        'len(cpus["pod3c0"]) == 2',
        'cpus["pod3c0"] == cpus["pod3c1"]',
        '"node2" not in nodes["pod3c0"]',
    )
    # node2 was kept free for it
    run.verify(
        pod4,
        '{"node2"} == nodes["pod4c0"]',
        'len(cores["pod4c0"]) == 2',
        'len(cpus["pod4c0"]) == 3',
    )
    # does not fit on node2: the hint gives way
    run.verify(
        pod5,
        '"node2" not in nodes["pod5c0"]',
        'len(cores["pod5c0"]) == 2',
        'len(cpus["pod5c0"]) == 2',
    )
