"""n4c16/test05-namespace: ``preferPerNamespaceBalloon`` and the preserve annotations."""

from __future__ import annotations

from tests.parity.balloons._sim import Script, config, res, simulate
from tests.parity.ports import port

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


@port("balloons/n4c16/test05-namespace")
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

    run.verify(pod0, 'cpus["pod0c0"] == cpus["pod0c1"]', 'len(cpus["pod0c0"]) == 2')
    # another namespace: its own instance
    run.verify(
        pod1,
        'cpus["pod1c0"] == cpus["pod1c1"]',
        'len(cpus["pod0c0"]) == 2',
        'disjoint_sets(cpus["pod0c0"], cpus["pod1c0"])',
    )
    # back to nsballoon[0], inflated to 4 without touching pod1's CPUs
    run.verify(
        pod2,
        'cpus["pod2c0"] == cpus["pod2c1"]',
        'len(cpus["pod2c0"]) == 4',
        'cpus["pod2c0"] == cpus["pod0c0"]',
        'cpus["pod2c0"] == cpus["pod0c1"]',
        'disjoint_sets(cpus["pod2c0"], cpus["pod1c0"])',
    )
    # nsballoon[0] is at maxCPUs: a new instance for the same namespace
    run.verify(
        pod3,
        'cpus["pod3c0"] == cpus["pod3c1"]',
        'len(cpus["pod3c0"]) == 2',
        'disjoint_sets(cpus["pod3c0"], cpus["pod2c0"], cpus["pod1c0"])',
    )
    run.verify(
        pod4,
        'cpus["pod4c0"] == cpus["pod4c1"]',
        'len(cpus["pod4c0"]) == 4',
        'disjoint_sets(cpus["pod4c0"], cpus["pod3c0"], cpus["pod2c0"], cpus["pod1c0"])',
    )
    run.verify(
        pod5,
        'cpus["pod5c0"] == cpus["pod5c1"]',
        'len(cpus["pod5c0"]) == 2',
        'disjoint_sets(cpus["pod5c0"], cpus["pod4c0"], cpus["pod3c0"], cpus["pod2c0"],'
        ' cpus["pod1c0"])',
    )
    # no CPUs left for a new instance: falls back to a shared one
    run.verify(pod6, 'cpus["pod6c0"] == cpus["pod6c1"]')
    # pod7c1 preserves its CPUs: in no balloon, on all CPUs
    run.verify(
        pod7,
        'cpus["pod6c0"] == cpus["pod7c0"]',
        'len(cpus["pod7c1"]) > len(cpus["pod7c0"])',
        'len(cpus["pod7c1"]) == 16',
    )
