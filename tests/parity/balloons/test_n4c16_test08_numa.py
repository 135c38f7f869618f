"""n4c16/test08-numa: one balloon type capped at a NUMA node's 4 CPUs; inflate and deflate."""

from __future__ import annotations

from tests.parity.balloons._sim import BESTEFFORT, Script, config, disjoint, res, simulate

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


def test_numa() -> None:
    s = Script()
    steps = [s.create(**BESTEFFORT)]  # pod0: best effort
    steps += [s.create(**G1) for _ in range(4)]  # pod1..pod4: guaranteed, 1 CPU each
    steps.append(s.create(**BESTEFFORT))  # pod5: best effort
    steps.append(s.create(**G1))  # pod6
    gone3 = s.delete("pod1", "pod2", "pod3")
    gone4 = s.delete("pod4")
    run = simulate(s, CONFIG)

    p = run.at(steps[0])
    assert len(p.cpus("pod0c0")) == 1  # best effort still gets a CPU
    # pod1..pod4 join the same balloon, which inflates one CPU per guaranteed CPU
    for n in range(1, 5):
        p = run.at(steps[n])
        first = p.cpus("pod0c0")
        assert len(first) == n, (n, first)
        assert all(p.cpus(f"pod{i}c0") == first for i in range(n + 1)), n
    p = run.at(steps[5])  # best effort into the full balloon
    assert all(p.cpus(f"pod{i}c0") == p.cpus("pod0c0") for i in range(6))
    assert len(p.cpus("pod5c0")) == 4
    p = run.at(steps[6])  # the balloon is full: a new one
    assert len(p.cpus("pod0c0")) == 4
    assert len(p.cpus("pod6c0")) == 1
    assert disjoint(p.cpus("pod0c0"), p.cpus("pod6c0"))
    p = run.at(gone3)  # one guaranteed container left: deflated to 1 CPU
    assert [len(p.cpus(f"pod{i}c0")) for i in (0, 4, 5, 6)] == [1, 1, 1, 1]
    assert p.cpus("pod0c0") == p.cpus("pod4c0") == p.cpus("pod5c0")
    assert disjoint(p.cpus("pod0c0"), p.cpus("pod6c0"))
    p = run.at(gone4)  # best effort only: still one CPU
    assert [len(p.cpus(f"pod{i}c0")) for i in (0, 5, 6)] == [1, 1, 1]
    assert p.cpus("pod0c0") == p.cpus("pod5c0")
    assert disjoint(p.cpus("pod0c0"), p.cpus("pod6c0"))
