"""n4c16/test03-reserved: the reserved balloon, reservedPoolNamespaces globs, inflating it.

CPUs 0-2 are the reserved cpuset: threads of cores 0 and 1 of NUMA node 0.
"""

from __future__ import annotations

from tests.parity.balloons._sim import BALLOON, Script, config, res, simulate
from tests.parity.ports import port

CONFIG = config("""
reservedResources:
  cpu: cpuset:0-2
idleCPUClass: idle-class
reservedPoolNamespaces:
  - "monitor-*"
  - "*-log*"
balloonTypes:
  - name: reserved
    namespaces: [my-exact-name]
    cpuClass: reserved-class
    minCPUs: 1
  - name: default
    minCPUs: 1
  - name: full-core
    minCPUs: 2
    maxCPUs: 2
    cpuClass: turbo
    minBalloons: 2
""")


@port("balloons/n4c16/test03-reserved")
def test_reserved() -> None:
    s = Script()
    g100 = res("100m", "100M")
    pod0 = s.create(namespace="kube-system", **g100)
    pod1 = s.create(namespace="monitor-mypods", contcount=2, **res("1", ""))
    pod2 = s.create(namespace="system-logs", **res("1", ""))
    pod3 = s.create(namespace="kube-system", annotations={BALLOON: "full-core"}, **res("2", ""))
    pod4 = s.create(**res("2500m", ""))
    pod5 = s.create(annotations={BALLOON: "reserved"}, **res("2500m", ""))
    s.delete(*(f"pod{i}" for i in range(6)))
    pod6 = s.create(**res("999m", ""))
    pod7 = s.create(namespace="kube-system", **g100)
    run = simulate(s, CONFIG)

    run.verify(pod0, 'cpus["pod0c0"].issubset({"cpu00", "cpu01", "cpu02"})')
    # first glob, both containers
    run.verify(pod1, 'cpus["pod1c0"] == cpus["pod0c0"]', 'cpus["pod1c1"] == cpus["pod0c0"]')
    run.verify(pod2, 'cpus["pod2c0"] == cpus["pod0c0"]')  # last glob
    # a kube-system pod annotated to full-core
    run.verify(pod3, 'len(cpus["pod3c0"]) == 2', 'disjoint_sets(cpus["pod0c0"], cpus["pod3c0"])')
    # default balloon inflates (no maxCPUs)
    run.verify(
        pod4,
        'len(cpus["pod4c0"]) == 3',
        'disjoint_sets(cpus["pod0c0"], cpus["pod3c0"], cpus["pod4c0"])',
    )
    # annotated to reserved: it inflates and keeps the reserved cpuset
    run.verify(
        pod5,
        '{"cpu00", "cpu01", "cpu02"}.issubset(cpus["pod5c0"])',
        'len(cpus["pod5c0"]) > 4',
        'disjoint_sets(cpus["pod5c0"], cpus["pod3c0"], cpus["pod4c0"])',
    )
    # all deleted: default and reserved balloons deflated back, not popped
    run.verify(pod6, 'len(cpus["pod6c0"]) == 1')
    run.verify(
        pod7,
        'cpus["pod7c0"].issubset({"cpu00", "cpu01", "cpu02"})',
        'len(cpus["pod7c0"]) < 3',
    )
