"""s8c4k/test01-sparse-4kcpus: a machine of 8 packages x 512 CPUs of which 6 are online.

Their VM boots with CPUs 0-2 and hot-plugs 511 (package 0), 1535 (package 2) and 4095
(package 7); ta-suite's S8C4K has those six present.  One NUMA node per package.  Their
NodeResourceTopology checks are left to the NRT tests.
"""

from __future__ import annotations

from tests.parity.balloons._sim import BALLOON, BESTEFFORT, S8C4K, Script, config, simulate
from tests.parity.ports import port

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


@port("balloons/s8c4k/test01-sparse-4kcpus")
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

    # pod0c0: its balloon plus package 0's idle CPUs
    run.verify(
        pod0,
        'cpus["pod0c0"] == {"cpu0511","cpu0002","cpu0000"}',
        'cpus["pod0c1"] == {"cpu1535"}',
        'cpus["pod0c2"] == {"cpu4095"}',
    )
