"""n6-hbm-cxl/test01-memory-types: a balloon type's ``memoryTypes``, the memory-type
annotation per container, and ``pinMemory: false`` per type.

Their n6-hbm-cxl VM (`N6_HBM_CXL`): DRAM nodes 0-1, HBM 2-3, PMEM 4-5; the same ids here.
"""

from __future__ import annotations

from tests.parity.balloons._sim import BALLOON, N6_HBM_CXL, Script, config, simulate
from tests.parity.machines import N6_HBM_CXL_CONSTS
from tests.parity.ports import port

CONFIG = config("""
reservedResources:
  cpu: "1"
pinCPU: true
pinMemory: true
balloonTypes:
  - name: mem-types
    minCPUs: 2
    maxCPUs: 2
    preferNewBalloons: true
    memoryTypes: [HBM, PMEM]
  - name: no-mem-types
    maxCPUs: 5
    allocatorPriority: none
    preferSpreadingPods: true
    preferNewBalloons: true
  - name: no-pin-mem
    minCPUs: 1
    maxCPUs: 1
    preferNewBalloons: true
    pinMemory: false
""")
MEMTYPE = "memory-type.resource-policy.nri.io/container."
PER_CONTAINER = f"{BALLOON}/container."


@port("balloons/n6-hbm-cxl/test01-memory-types")
def test_memory_types() -> None:
    s = Script()
    annotations = {
        f"{MEMTYPE}pod0c0": "hbm",
        f"{MEMTYPE}pod0c1": "dram",
        f"{MEMTYPE}pod0c2": "pmem",
        f"{MEMTYPE}pod0c3": "hbm,dram",
        f"{MEMTYPE}pod0c4": "dram,pmem",
        f"{MEMTYPE}pod0c5": "hbm,dram,pmem",
        f"{PER_CONTAINER}pod0c0": "mem-types",
        f"{PER_CONTAINER}pod0c6": "mem-types",
        f"{PER_CONTAINER}pod0c7": "no-mem-types",
        f"{PER_CONTAINER}pod0c8": "no-pin-mem",
    }
    pod0 = s.create(
        contcount=9,
        cpureq="200m",
        cpulim="",
        memreq="300M",
        memlim="300M",
        annotations=annotations,
    )
    # their template sets limits only with CPULIM; MEMLIM alone is dropped there too
    run = simulate(s, CONFIG, topology=N6_HBM_CXL, consts=N6_HBM_CXL_CONSTS)

    # pod0c0: the annotation wins over the type's memoryTypes; pod0c6: the type's;
    # pod0c8: not pinned, all memory
    run.verify(
        pod0,
        'mems["pod0c0"] == {hbm0}             if packages["pod0c0"] == {"package0"}'
        ' else mems["pod0c0"] == {hbm1}',
        'mems["pod0c1"] == {dram0}            if packages["pod0c1"] == {"package0"}'
        ' else mems["pod0c1"] == {dram1}',
        'mems["pod0c2"] == {pmem0}            if packages["pod0c2"] == {"package0"}'
        ' else mems["pod0c2"] == {pmem1}',
        'mems["pod0c3"] == {hbm0,dram0}       if packages["pod0c3"] == {"package0"}'
        ' else mems["pod0c3"] == {hbm1,dram1}',
        'mems["pod0c4"] == {dram0,pmem0}      if packages["pod0c4"] == {"package0"}'
        ' else mems["pod0c4"] == {dram1,pmem1}',
        'mems["pod0c5"] == {hbm0,dram0,pmem0} if packages["pod0c5"] == {"package0"}'
        ' else mems["pod0c5"] == {hbm1,dram1,pmem1}',
        'mems["pod0c6"] == {hbm0,pmem0}       if packages["pod0c6"] == {"package0"}'
        ' else mems["pod0c6"] == {hbm1,pmem1}',
        'mems["pod0c7"] == {dram0}            if packages["pod0c7"] == {"package0"}'
        ' else mems["pod0c7"] == {dram1}',
        'mems["pod0c8"] == {dram0,dram1,hbm0,hbm1,pmem0,pmem1}',
    )
