"""n4c16/test05-namespace: ``preferPerNamespaceBalloon`` and the preserve annotations."""

from __future__ import annotations

from tests.parity.balloons._sim import Script, config, disjoint, res, simulate

CONFIG = config("""
reservedResources:
  cpu: "1"
pinCPU: true
pinMemory: true
balloonTypes:
  - name: nsballoon
    namespaces: ["*"]
    minCPUs: 2
    maxCPUs: 4
    preferPerNamespaceBalloon: true
""")
G2 = res("2", "100M")
G100 = res("100m", "100M")


def test_namespace() -> None:
    s = Script()
    pod0 = s.create(contcount=2, cpureq="")  # their CPUREQ="" on a line of its own
    pod1 = s.create(namespace="e2e-a", contcount=2, cpureq="")
    pod2 = s.create(contcount=2, **G2)
    pod3 = s.create(contcount=2, **G100)
    pod4 = s.create(namespace="e2e-b", contcount=2, **G2)
    pod5 = s.create(namespace="e2e-c", contcount=2, **G100)
    pod6 = s.create(namespace="e2e-d", contcount=2, **G100)
    pod7 = s.create(
        namespace="e2e-d",
        contcount=3,
        annotations={
            "cpu.preserve.resource-policy.nri.io/container.pod7c1": "true",
            "memory.preserve.resource-policy.nri.io": "true",
        },
        **G100,
    )
    run = simulate(s, CONFIG)

    p = run.at(pod0)  # nsballoon[0]
    assert p.cpus("pod0c0") == p.cpus("pod0c1")
    assert len(p.cpus("pod0c0")) == 2
    p = run.at(pod1)  # another namespace: its own instance
    assert p.cpus("pod1c0") == p.cpus("pod1c1")
    assert len(p.cpus("pod0c0")) == 2
    assert disjoint(p.cpus("pod0c0"), p.cpus("pod1c0"))
    p = run.at(pod2)  # back to nsballoon[0], inflated to 4 without touching pod1's CPUs
    assert p.cpus("pod2c0") == p.cpus("pod2c1") == p.cpus("pod0c0") == p.cpus("pod0c1")
    assert len(p.cpus("pod2c0")) == 4
    assert disjoint(p.cpus("pod2c0"), p.cpus("pod1c0"))
    p = run.at(pod3)  # nsballoon[0] is at maxCPUs: a new instance for the same namespace
    assert p.cpus("pod3c0") == p.cpus("pod3c1")
    assert len(p.cpus("pod3c0")) == 2
    assert disjoint(p.cpus("pod3c0"), p.cpus("pod2c0"), p.cpus("pod1c0"))
    p = run.at(pod4)
    assert p.cpus("pod4c0") == p.cpus("pod4c1")
    assert len(p.cpus("pod4c0")) == 4
    assert disjoint(*(p.cpus(f"pod{i}c0") for i in (4, 3, 2, 1)))
    p = run.at(pod5)
    assert p.cpus("pod5c0") == p.cpus("pod5c1")
    assert len(p.cpus("pod5c0")) == 2
    assert disjoint(*(p.cpus(f"pod{i}c0") for i in (5, 4, 3, 2, 1)))
    p = run.at(pod6)  # no CPUs left for a new instance: falls back to a shared one
    assert p.cpus("pod6c0") == p.cpus("pod6c1")
    p = run.at(pod7)  # pod7c1 preserves its CPUs: in no balloon, on all CPUs
    assert p.cpus("pod6c0") == p.cpus("pod7c0")
    assert len(p.cpus("pod7c1")) > len(p.cpus("pod7c0"))
    assert len(p.cpus("pod7c1")) == 16
