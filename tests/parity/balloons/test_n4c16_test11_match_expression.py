"""n4c16/test11-match-expression: balloon type ``matchExpressions`` and ``preserve``.

Their configuration is the suite's match-config.yaml.
"""

from __future__ import annotations

from tests.parity.balloons._sim import Script, config, simulate
from tests.parity.ports import port

CONFIG = config("""
reservedResources:
  cpu: 750m
pinCPU: true
pinMemory: true
idleCPUClass: normal
allocatorTopologyBalancing: true
preserve:
  matchExpressions:
    - key: name
      operator: In
      values: [pod1cX, pod2c1, pod2c2, pod3cX]
balloonTypes:
  - name: special
    matchExpressions:
      - key: pod/labels/app.kubernetes.io/component
        operator: Equals
        values: ["precious"]
    minCPUs: 2
    maxCPUs: 2
  - name: default
    namespaces: [default]
    minCPUs: 1
    maxCPUs: 1
    allocatorPriority: normal
reservedPoolNamespaces: [kube-system]
""")


@port("balloons/n4c16/test11-match-expression")
def test_match_expression() -> None:
    s = Script()
    pod0 = s.create(labels={"app.kubernetes.io/component": "precious"})
    pod1 = s.create()
    pod2 = s.create(contcount=4)
    run = simulate(s, CONFIG)

    run.verify(pod0, 'len(cpus["pod0c0"]) == 2')  # the special balloon
    run.verify(pod1, 'len(cpus["pod1c0"]) == 1')  # the default balloon
    # pod2c1 and pod2c2 are preserved by name: all CPUs
    run.verify(
        pod2,
        'len(cpus["pod2c0"]) == 1',
        'len(cpus["pod2c1"]) == 16',
        'len(cpus["pod2c2"]) == 16',
        'len(cpus["pod2c3"]) == 1',
    )
