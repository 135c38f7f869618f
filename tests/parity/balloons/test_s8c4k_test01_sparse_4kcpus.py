"""s8c4k/test01-sparse-4kcpus: a machine of 8 packages x 512 CPUs of which 6 are online.

Their VM boots with CPUs 0-2 and hot-plugs 511 (package 0), 1535 (package 2) and 4095
(package 7); ta-suite's S8C4K has those six present.  One NUMA node per package.  Their
NodeResourceTopology checks are left to the NRT tests.
"""

from __future__ import annotations

from nri_resmgr.topology.cpuset import IDSet
from tests.parity.balloons._sim import BALLOON, BESTEFFORT, S8C4K, Script, config, simulate

CONFIG = config("""
pinCPU: true
pinMemory: false
balloonTypes:
  - name: pkg0
    minCPUs: 1
    maxCPUs: 1
    preferCloseToDevices: [/sys/devices/system/node/node0]
    shareIdleCPUsInSame: package
  - name: pkg2
    minCPUs: 1
    maxCPUs: 1
    preferCloseToDevices: [/sys/devices/system/node/node2]
  - name: pkg7
    minCPUs: 1
    maxCPUs: 1
    minBalloons: 1
    preferCloseToDevices: [/sys/devices/system/node/node7]
availableResources:
  cpu: cpuset:0-4095
reservedResources:
  cpu: "cpuset:1"
""")
PER_CONTAINER = f"{BALLOON}/container."


def test_sparse_4kcpus() -> None:
    s = Script()
    # their `create besteffort` template writes no resources whatever CPUREQ.. say
    pod0 = s.create(
        contcount=3,
        **BESTEFFORT,
        annotations={
            f"{PER_CONTAINER}pod0c0": "pkg0",
            f"{PER_CONTAINER}pod0c1": "pkg2",
            f"{PER_CONTAINER}pod0c2": "pkg7",
        },
    )
    run = simulate(s, CONFIG, topology=S8C4K)

    p = run.at(pod0)
    assert p.cpus("pod0c0") == IDSet({0, 2, 511})  # its balloon plus package 0's idle CPUs
    assert p.cpus("pod0c1") == IDSet({1535})
    assert p.cpus("pod0c2") == IDSet({4095})
