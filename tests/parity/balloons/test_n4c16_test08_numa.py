"""n4c16/test08-numa: one balloon type capped at a NUMA node's 4 CPUs; inflate and deflate."""

from __future__ import annotations

from tests.parity.balloons._sim import BESTEFFORT, Script, config, res, simulate
from tests.parity.ports import port

CONFIG = config("""
availableResources:
  cpu: cpuset:0-15
reservedResources:
  cpu: "1"
pinCPU: true
pinMemory: true
balloonTypes:
  - name: fit-in-numa
    namespaces: ["*"]
    minCPUs: 0
    maxCPUs: 4
    allocatorPriority: high
    preferNewBalloons: false
""")
G1 = res("1", "50M")


@port("balloons/n4c16/test08-numa")
def test_numa() -> None:
    s = Script()
    steps = [s.create(**BESTEFFORT)]  # pod0: best effort
    steps += [s.create(**G1) for _ in range(4)]  # pod1..pod4: guaranteed, 1 CPU each
    steps.append(s.create(**BESTEFFORT))  # pod5: best effort
    steps.append(s.create(**G1))  # pod6
    gone3 = s.delete("pod1", "pod2", "pod3")
    gone4 = s.delete("pod4")
    run = simulate(s, CONFIG)

    run.verify(steps[0], 'len(cpus["pod0c0"]) == 1')  # best effort still gets a CPU
    # pod1..pod4 join the same balloon, which inflates one CPU per guaranteed CPU
    run.verify(
        steps[1],
        'len(cpus["pod0c0"]) == 1',
        'len(cpus["pod1c0"]) == 1',
        'cpus["pod0c0"] == cpus["pod1c0"]',
    )
    run.verify(
        steps[2],
        'len(cpus["pod0c0"]) == 2',
        'len(cpus["pod1c0"]) == 2',
        'len(cpus["pod2c0"]) == 2',
        'cpus["pod0c0"] == cpus["pod1c0"] == cpus["pod2c0"]',
    )
    run.verify(
        steps[3],
        'len(cpus["pod0c0"]) == 3',
        'len(cpus["pod1c0"]) == 3',
        'len(cpus["pod2c0"]) == 3',
        'len(cpus["pod3c0"]) == 3',
        'cpus["pod0c0"] == cpus["pod1c0"] == cpus["pod2c0"] == cpus["pod3c0"]',
    )
    run.verify(
        steps[4],
        'len(cpus["pod0c0"]) == 4',
        'len(cpus["pod1c0"]) == 4',
        'len(cpus["pod2c0"]) == 4',
        'len(cpus["pod3c0"]) == 4',
        'len(cpus["pod4c0"]) == 4',
        'cpus["pod0c0"] == cpus["pod1c0"] == cpus["pod2c0"] == cpus["pod3c0"] == cpus["pod4c0"]',
    )
    # best effort into the full balloon
    run.verify(
        steps[5],
        'len(cpus["pod0c0"]) == 4',
        'len(cpus["pod1c0"]) == 4',
        'len(cpus["pod2c0"]) == 4',
        'len(cpus["pod3c0"]) == 4',
        'len(cpus["pod4c0"]) == 4',
        'len(cpus["pod5c0"]) == 4',
        'cpus["pod0c0"] == cpus["pod1c0"] == cpus["pod2c0"] == cpus["pod3c0"] == cpus["pod4c0"]'
        ' == cpus["pod5c0"]',
    )
    # the balloon is full: a new one
    run.verify(
        steps[6],
        'len(cpus["pod0c0"]) == 4',
        'len(cpus["pod1c0"]) == 4',
        'len(cpus["pod2c0"]) == 4',
        'len(cpus["pod3c0"]) == 4',
        'len(cpus["pod4c0"]) == 4',
        'len(cpus["pod5c0"]) == 4',
        'len(cpus["pod6c0"]) == 1',
        'cpus["pod0c0"] == cpus["pod1c0"] == cpus["pod2c0"] == cpus["pod3c0"] == cpus["pod4c0"]',
        'disjoint_sets(cpus["pod0c0"], cpus["pod6c0"])',
    )
    # one guaranteed container left: deflated to 1 CPU
    run.verify(
        gone3,
        'len(cpus["pod0c0"]) == 1',
        'len(cpus["pod4c0"]) == 1',
        'len(cpus["pod5c0"]) == 1',
        'len(cpus["pod6c0"]) == 1',
        'cpus["pod0c0"] == cpus["pod4c0"] == cpus["pod5c0"]',
        'disjoint_sets(cpus["pod0c0"], cpus["pod6c0"])',
    )
    # best effort only: still one CPU
    run.verify(
        gone4,
        'len(cpus["pod0c0"]) == 1',
        'len(cpus["pod5c0"]) == 1',
        'len(cpus["pod6c0"]) == 1',
        'cpus["pod0c0"] == cpus["pod5c0"]',
        'disjoint_sets(cpus["pod0c0"], cpus["pod6c0"])',
    )
