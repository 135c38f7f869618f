"""n4c16/test03-reserved: the reserved balloon, reservedPoolNamespaces globs, inflating it.

CPUs 0-2 are the reserved cpuset: threads of cores 0 and 1 of NUMA node 0.
"""

from __future__ import annotations

from nri_resmgr.topology.cpuset import IDSet
from tests.parity.balloons._sim import BALLOON, Script, config, disjoint, res, simulate

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
RESERVED = IDSet({0, 1, 2})


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

    p = run.at(pod0)
    assert p.cpus("pod0c0") <= RESERVED
    p = run.at(pod1)  # first glob, both containers
    assert p.cpus("pod1c0") == p.cpus("pod0c0")
    assert p.cpus("pod1c1") == p.cpus("pod0c0")
    p = run.at(pod2)  # last glob
    assert p.cpus("pod2c0") == p.cpus("pod0c0")
    p = run.at(pod3)  # a kube-system pod annotated to full-core
    assert len(p.cpus("pod3c0")) == 2
    assert disjoint(p.cpus("pod0c0"), p.cpus("pod3c0"))
    p = run.at(pod4)  # default balloon inflates (no maxCPUs)
    assert len(p.cpus("pod4c0")) == 3
    assert disjoint(p.cpus("pod0c0"), p.cpus("pod3c0"), p.cpus("pod4c0"))
    p = run.at(pod5)  # annotated to reserved: it inflates and keeps the reserved cpuset
    assert not RESERVED - p.cpus("pod5c0")
    assert len(p.cpus("pod5c0")) > 4
    assert disjoint(p.cpus("pod5c0"), p.cpus("pod3c0"), p.cpus("pod4c0"))
    # all deleted: default and reserved balloons deflated back, not popped
    p = run.at(pod6)
    assert len(p.cpus("pod6c0")) == 1
    p = run.at(pod7)
    assert p.cpus("pod7c0") <= RESERVED
    assert len(p.cpus("pod7c0")) < 3
