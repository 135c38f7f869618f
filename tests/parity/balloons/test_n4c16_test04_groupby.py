"""n4c16/test04-groupby: ``groupBy`` puts containers with the same key in the same instance.

Their check of the ``groups`` label of the balloons metric is left to the metrics tests.
"""

from __future__ import annotations

from tests.parity.balloons._sim import BALLOON, Script, config, simulate
from tests.parity.ports import port

CONFIG = config("""
balloonTypes:
  - name: grouped-by-label
    groupBy: ${pod/namespace}-${pod/labels/balloon-instance}
    minCPUs: 2
    minBalloons: 2
    preferNewBalloons: true
  - name: default
    groupBy: ns=$pod/namespace
    preferNewBalloons: true
""")
NS = "e2e-balloons-test04"


@port("balloons/n4c16/test04-groupby")
def test_groupby() -> None:
    s = Script()  # their script never sets CPUREQ..MEMLIM: run.sh's defaults throughout
    grouped = {BALLOON: "grouped-by-label"}
    s.create(annotations=grouped, labels={"balloon-instance": "g1"})
    s.create(annotations=grouped, labels={"balloon-instance": "g2"})
    s.create(annotations=grouped, labels={"balloon-instance": "g1"})
    pod3 = s.create(namespace=NS, annotations=grouped, labels={"balloon-instance": "g1"})
    s.create(namespace=NS)
    s.create()
    s.create()
    pod7 = s.create(namespace=NS)
    run = simulate(s, CONFIG)

    run.verify(
        pod3,
        'cpus["pod0c0"] == cpus["pod2c0"]',
        'disjoint_sets(cpus["pod0c0"], cpus["pod1c0"], cpus["pod3c0"])',
    )
    # default balloons grouped by namespace
    run.verify(
        pod7,
        'cpus["pod4c0"] == cpus["pod7c0"]',
        'cpus["pod5c0"] == cpus["pod6c0"]',
        'disjoint_sets(cpus["pod4c0"], cpus["pod5c0"])',
    )
