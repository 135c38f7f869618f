"""n4c16/test22-isolcpus: ``preferIsolCpus`` takes the kernel's isolated CPUs (isolcpus=0,1).

Their VM reboots with isolcpus=0,1; our machine model marks CPUs 0 and 1 isolated.
Their script sets no CPUREQ/CPULIM/MEMREQ/MEMLIM, so their framework's defaults apply
(``yaml_in_defaults`` in their run.sh: CPUREQ=1 CPULIM=2 MEMREQ=100M MEMLIM=200M):
each container asks for one CPU, which is why pod1's two fill both isolated CPUs.
"""

from __future__ import annotations

from tests.parity.balloons._sim import N4C16, Script, config, simulate
from tests.parity.ports import port

CONFIG = config("""
balloonTypes:
  - name: isolcpus
    minCPUs: 1
    minBalloons: 1
    preferIsolCpus: true
    namespaces: [isolcpus]
""")


@port("balloons/n4c16/test22-isolcpus")
def test_isolcpus() -> None:
    s = Script()  # their script sets no resources: run.sh's defaults
    pod0 = s.create(contcount=2)
    pod1 = s.create(namespace="isolcpus", contcount=2)
    run = simulate(s, CONFIG, topology={**N4C16, "isolated": "0-1"})

    run.verify(pod0, "set.union(cpus['pod0c0'], cpus['pod0c1']).isdisjoint({'cpu00', 'cpu01'})")
    run.verify(pod1, "cpus['pod1c0'] == {'cpu00', 'cpu01'}")
    run.verify(pod1, "cpus['pod1c1'] == {'cpu00', 'cpu01'}")
