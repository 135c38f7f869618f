"""n4c16/test23-available-cpus: ``exclude-cpuset:`` in available and reserved resources.

Available: all but 0-1,4-5,8-9,12-13; reserved: all but 4-15, so the reserved CPUs are
2-3, the two threads of one core.
"""

from __future__ import annotations

from nri_resmgr.topology.cpuset import IDSet
from tests.parity.balloons._sim import Script, config, simulate

CONFIG = config("""
availableResources:
  cpu: exclude-cpuset:0-1,4-5,8-9,12-13
reservedResources:
  cpu: exclude-cpuset:4-15
idleCPUClass: idle-class
reservedPoolNamespaces: [reserved]
balloonTypes:
  - name: reserved
    cpuClass: reserved-class
    minCPUs: 1
    maxCPUs: 2
""")


def test_available_cpus() -> None:
    s = Script()
    # their CPUREQ="50m" CPULIM="" create: MEMREQ keeps run.sh's default
    pod0 = s.create(namespace="kube-system", cpureq="50m", cpulim="")
    pod1 = s.create(namespace="reserved", cpureq="50m", cpulim="")
    run = simulate(s, CONFIG)

    assert run.at(pod0).cpus("pod0c0") <= IDSet({2, 3})
    assert run.at(pod1).cpus("pod1c0") <= IDSet({2, 3})
