"""n4c16/test09-isolated: ``minBalloons`` instances filled before new ones are made.

Their metric checks (which instances exist) are evaluated as written over the balloons'
metric lines (`tests.parity.ports.metric_lines`), the first three on the balloons of the
launch (`Script.launched`).
"""

from __future__ import annotations

from tests.parity.balloons._sim import BALLOON, BESTEFFORT, Script, config, simulate
from tests.parity.ports import port

CONFIG = config("""
reservedResources:
  cpu: cpuset:0
balloonTypes:
  - name: isolated-pods
    minCPUs: 0
    maxCPUs: 2
    cpuClass: turbo
    minBalloons: 2
    preferNewBalloons: true
    preferSpreadingPods: false
  - name: isolated-ctrs
    minCPUs: 1
    maxCPUs: 1
    cpuClass: turbo
    minBalloons: 2
    preferNewBalloons: true
    preferSpreadingPods: true
""")


@port("balloons/n4c16/test09-isolated")
def test_isolated() -> None:
    s = Script()
    launch = s.launched()
    pods = {BALLOON: "isolated-pods"}
    pod0 = s.create(contcount=2, annotations=pods, **BESTEFFORT)
    pod1 = s.create(
        contcount=2,
        cpureq="600m",
        cpulim="600m",
        memreq="100M",
        memlim="100M",
        annotations=pods,
    )
    # their MEMREQ and MEMLIM still 100M from pod1's line
    pod2 = s.create(
        contcount=2,
        cpureq="100m",
        cpulim="200m",
        memreq="100M",
        memlim="100M",
        annotations=pods,
    )
    pod3 = s.create(contcount=4, annotations={BALLOON: "isolated-ctrs"}, **BESTEFFORT)
    run = simulate(s, CONFIG)

    # after the launch, before any pod: the two pre-made instances and no third
    run.metrics(
        launch,
        has=[r'balloon="isolated-pods\[0\]"', r'balloon="isolated-pods\[1\]"'],
        has_no=[r'balloon="isolated-pods\[2\]"'],
    )
    run.verify(
        pod0,
        'len(cpus["pod0c0"]) == 1',
        'len(cpus["pod0c1"]) == 1',
        'cpus["pod0c0"] == cpus["pod0c1"]',
    )
    # pod0 and pod1 fill the empty pre-made instances before preferNewBalloons makes one
    run.metrics(
        pod0,
        has=[r'balloon="isolated-pods\[0\]"', r'balloon="isolated-pods\[1\]"'],
        has_no=[r'balloon="isolated-pods\[2\]"'],
    )
    run.verify(
        pod1,
        'len(cpus["pod0c0"]) == 1',
        'len(cpus["pod0c1"]) == 1',
        'len(cpus["pod1c0"]) == 2',
        'len(cpus["pod1c1"]) == 2',
        'cpus["pod0c0"] == cpus["pod0c1"]',
        'cpus["pod1c0"] == cpus["pod1c1"]',
        'disjoint_sets(cpus["pod0c0"], cpus["pod1c0"])',
    )
    run.metrics(
        pod1,
        has=[r'balloon="isolated-pods\[0\]"', r'balloon="isolated-pods\[1\]"'],
        has_no=[r'balloon="isolated-pods\[2\]"'],
    )
    run.verify(
        pod2,
        'len(cpus["pod0c0"]) == 1',
        'len(cpus["pod0c1"]) == 1',
        'len(cpus["pod1c0"]) == 2',
        'len(cpus["pod1c1"]) == 2',
        'len(cpus["pod2c0"]) == 1',
        'len(cpus["pod2c1"]) == 1',
        'cpus["pod0c0"] == cpus["pod0c1"]',
        'cpus["pod1c0"] == cpus["pod1c1"]',
        'cpus["pod2c0"] == cpus["pod2c1"]',
        'disjoint_sets(cpus["pod0c0"], cpus["pod1c0"], cpus["pod2c0"])',
    )
    run.metrics(
        pod2,
        has=[
            r'balloon="isolated-pods\[0\]"',
            r'balloon="isolated-pods\[1\]"',
            r'balloon="isolated-pods\[2\]"',
        ],
        has_no=[r'balloon="isolated-pods\[3\]"'],
    )
    run.verify(
        pod3,
        'len(cpus["pod0c0"]) == 1',
        'len(cpus["pod0c1"]) == 1',
        'len(cpus["pod1c0"]) == 2',
        'len(cpus["pod1c1"]) == 2',
        'len(cpus["pod2c0"]) == 1',
        'len(cpus["pod2c1"]) == 1',
        'len(cpus["pod3c0"]) == 1',
        'len(cpus["pod3c1"]) == 1',
        'len(cpus["pod3c2"]) == 1',
        'len(cpus["pod3c3"]) == 1',
        'cpus["pod0c0"] == cpus["pod0c1"]',
        'cpus["pod1c0"] == cpus["pod1c1"]',
        'cpus["pod2c0"] == cpus["pod2c1"]',
        'disjoint_sets(cpus["pod0c0"], cpus["pod1c0"], cpus["pod2c0"])',
        'disjoint_sets(cpus["pod3c0"], cpus["pod3c1"], cpus["pod3c2"], cpus["pod3c3"])',
        'disjoint_sets(cpus["pod0c0"], cpus["pod1c0"], cpus["pod2c0"], cpus["pod3c0"],'
        ' cpus["pod3c1"], cpus["pod3c2"], cpus["pod3c3"])',
    )
    run.metrics(
        pod3,
        has=[
            r'balloon="isolated-pods\[0\]"',
            r'balloon="isolated-pods\[1\]"',
            r'balloon="isolated-pods\[2\]"',
            r'balloon="isolated-ctrs\[0\]"',
            r'balloon="isolated-ctrs\[1\]"',
            r'balloon="isolated-ctrs\[2\]"',
            r'balloon="isolated-ctrs\[3\]"',
        ],
        has_no=[r'balloon="isolated-pods\[3\]"'],
    )
