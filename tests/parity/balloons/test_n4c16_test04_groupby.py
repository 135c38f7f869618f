"""n4c16/test04-groupby: ``groupBy`` puts containers with the same key in the same instance.

Their check of the ``groups`` label of the balloons metric is left to the metrics tests.
"""

from __future__ import annotations

from tests.parity.balloons._sim import BALLOON, Script, config, disjoint, simulate

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

    p = run.at(pod3)
    assert p.cpus("pod0c0") == p.cpus("pod2c0")
    assert disjoint(p.cpus("pod0c0"), p.cpus("pod1c0"), p.cpus("pod3c0"))
    # default balloons grouped by namespace
    p = run.at(pod7)
    assert p.cpus("pod4c0") == p.cpus("pod7c0")
    assert p.cpus("pod5c0") == p.cpus("pod6c0")
    assert disjoint(p.cpus("pod4c0"), p.cpus("pod5c0"))
