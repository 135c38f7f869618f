"""n4c16/test09-isolated: ``minBalloons`` instances filled before new ones are made.

Their metric checks (which instances exist) are read here from the placements: the
number of distinct cpusets of a type's containers.
"""

from __future__ import annotations

from tests.parity.balloons._sim import BALLOON, BESTEFFORT, Script, config, disjoint, simulate

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


def test_isolated() -> None:
    s = Script()
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

    p = run.at(pod0)
    assert len(p.cpus("pod0c0")) == 1
    assert p.cpus("pod0c0") == p.cpus("pod0c1")
    p = run.at(pod1)  # the second pre-made instance, inflated to 2 CPUs
    assert len(p.cpus("pod0c0")) == 1
    assert len(p.cpus("pod1c0")) == 2
    assert p.cpus("pod1c0") == p.cpus("pod1c1")
    assert disjoint(p.cpus("pod0c0"), p.cpus("pod1c0"))
    p = run.at(pod2)  # a third instance
    assert [len(p.cpus(c)) for c in ("pod0c0", "pod1c0", "pod2c0")] == [1, 2, 1]
    assert p.cpus("pod2c0") == p.cpus("pod2c1")
    assert disjoint(p.cpus("pod0c0"), p.cpus("pod1c0"), p.cpus("pod2c0"))
    p = run.at(pod3)  # each container in its own isolated-ctrs instance
    ctrs = [p.cpus(f"pod3c{i}") for i in range(4)]
    assert [len(c) for c in ctrs] == [1, 1, 1, 1]
    assert [len(p.cpus(c)) for c in ("pod0c0", "pod1c0", "pod2c0")] == [1, 2, 1]
    assert disjoint(p.cpus("pod0c0"), p.cpus("pod1c0"), p.cpus("pod2c0"), *ctrs)
