"""n4c16/test23-available-cpus: ``exclude-cpuset:`` in available and reserved resources.

Available: all but 0-1,4-5,8-9,12-13; reserved: all but 4-15, so the reserved CPUs are
2-3, the two threads of one core.
"""

from __future__ import annotations

from tests.parity.balloons._sim import Script, config, simulate
from tests.parity.ports import port

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


@port("balloons/n4c16/test23-available-cpus")
def test_available_cpus() -> None:
    s = Script()
    # their CPUREQ="50m" CPULIM="" create: MEMREQ keeps run.sh's default
    pod0 = s.create(namespace="kube-system", cpureq="50m", cpulim="")
    pod1 = s.create(namespace="reserved", cpureq="50m", cpulim="")
    run = simulate(s, CONFIG)

    run.verify(pod0, 'cpus["pod0c0"].issubset({"cpu02", "cpu03"})')
    run.verify(pod1, 'cpus["pod1c0"].issubset({"cpu02", "cpu03"})')
