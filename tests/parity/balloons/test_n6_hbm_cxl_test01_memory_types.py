"""n6-hbm-cxl/test01-memory-types: a balloon type's ``memoryTypes``, the memory-type
annotation per container, and ``pinMemory: false`` per type.

Their n6-hbm-cxl VM (`N6_HBM_CXL`): DRAM nodes 0-1, HBM 2-3, PMEM 4-5; the same ids here.
"""

from __future__ import annotations

from nri_resmgr.topology.cpuset import IDSet
from tests.parity.balloons._sim import BALLOON, N6_HBM_CXL, Script, config, simulate

DRAM, HBM, PMEM = (0, 1), (2, 3), (4, 5)

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
    run = simulate(s, CONFIG, topology=N6_HBM_CXL)

    p = run.at(pod0)

    def expect(ctr: str, *kinds: tuple[int, int]) -> None:
        (pkg,) = p.packages(ctr)
        assert p.mems(ctr) == IDSet(kind[pkg] for kind in kinds), ctr

    expect("pod0c0", HBM)  # the annotation wins over the type's memoryTypes
    expect("pod0c1", DRAM)
    expect("pod0c2", PMEM)
    expect("pod0c3", HBM, DRAM)
    expect("pod0c4", DRAM, PMEM)
    expect("pod0c5", HBM, DRAM, PMEM)
    expect("pod0c6", HBM, PMEM)  # the type's memoryTypes
    expect("pod0c7", DRAM)
    assert p.mems("pod0c8") == IDSet(range(6))  # not pinned: all memory
