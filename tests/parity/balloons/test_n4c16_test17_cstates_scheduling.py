"""n4c16/test17-cstates-scheduling, its placements: a low-latency balloon inflating and
deflating within ``availableResources``.

Not here: the C-state ``disable`` writes of the CPU class (cpuidle files; the CPU class
control's tests, on a synthetic sysfs tree) and the scheduling policy, priority and I/O
priority of the started process (SCHED_FIFO 42, SCHED_IDLE nice 17, best-effort 6),
which only a real container shows.
"""

from __future__ import annotations

from nri_resmgr.topology.cpuset import IDSet
from tests.parity.balloons._sim import BALLOON, Script, config, simulate

CONFIG = config("""
allocatorTopologyBalancing: false
availableResources:
  cpu: cpuset:2-7,10-13
reservedResources:
  cpu: 750m
pinCPU: true
idleCPUClass: default-class
balloonTypes:
- name: lowlatency-bln
  cpuClass: lowlatency-class
  schedulingClass: realtime
cpuClasses:
- name: lowlatency-class
  disabledCstates: [C4, C6, C8, C10]
- name: default-class
  disabledCstates: []
schedulingClasses:
- name: realtime
  policy: fifo
  priority: 42
- name: run-when-free
  policy: idle
  nice: 17
  ioClass: be
  ioPriority: 6
""")
AVAILABLE = IDSet.parse("2-7,10-13")


def test_cstates_scheduling_placements() -> None:
    s = Script()
    low = {BALLOON: "lowlatency-bln"}
    pod0 = s.create(annotations=low, cpureq="750m", cpulim="750m", memreq="100M")
    pod1 = s.create(
        annotations={**low, "scheduling-class.resource-policy.nri.io": "run-when-free"},
        cpureq="3", memreq="100M",
    )  # fmt: skip
    gone = s.delete("pod1")
    run = simulate(s, CONFIG)

    p = run.at(pod0)
    assert len(p.cpus("pod0c0")) == 1
    assert p.cpus("pod0c0") <= AVAILABLE
    p = run.at(pod1)  # inflated to 4 for 0.75 + 3 CPUs
    assert p.cpus("pod0c0") == p.cpus("pod1c0")
    assert len(p.cpus("pod0c0")) == 4
    assert p.cpus("pod0c0") <= AVAILABLE
    assert len(run.at(gone).cpus("pod0c0")) == 1  # deflated again
