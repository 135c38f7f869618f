"""n4c16/test17-cstates-scheduling: a low-latency balloon inflating and deflating within
``availableResources``, and the scheduling class each container is created with.

Their scheduling checks read ``policy`` and ``prio`` from the started process's
/proc/PID/sched and its ``ionice``; here the same numbers come from the creation
adjustment the daemon sends (`runtime.adapter.adjustment_for`), turned into what the
kernel shows by `kernel_view` (real-time: 99 - priority; others: 120 + nice).

Not here: the C-state ``disable`` writes of the CPU class (cpuidle files; the CPU class
control's tests, on a synthetic sysfs tree).
"""

from __future__ import annotations

from nri_api import api
from nri_resmgr.policy.balloons import BalloonsPolicy
from nri_resmgr.runtime.adapter import adjustment_for
from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.load import load_topology
from tests.parity.balloons._sim import BALLOON, N4C16, Script, config, simulate
from tests.unit.resmgr.balloons.support import bctr
from tests.unit.resmgr.test_sched_classes import SCHED_FIFO, SCHED_IDLE, kernel_view

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
    pod0 = s.create(annotations=low, cpureq="750m", cpulim="750m", memreq="100M", memlim="")
    pod1 = s.create(
        annotations={**low, "scheduling-class.resource-policy.nri.io": "run-when-free"},
        cpureq="3", cpulim="", memreq="100M", memlim="",
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


def test_cstates_scheduling_classes() -> None:
    p = BalloonsPolicy(topology=load_topology(dict(N4C16)), config=CONFIG)
    low = {BALLOON: "lowlatency-bln"}
    # pod0: the balloon type's class, realtime (SCHED_FIFO 42)
    d0 = p.allocate(p.initial_state(), bctr("pod0c0", pod="pod0", milli=750, ann=low))
    assert d0.assignment is not None
    pod0 = adjustment_for(d0.assignment)
    assert kernel_view(pod0) == (SCHED_FIFO, 99 - 42)
    assert not pod0.linux.HasField("io_priority")
    # pod1: its annotation's class over the type's, run-when-free (SCHED_IDLE nice 17,
    # ionice "best-effort: prio 6")
    ann = {**low, "scheduling-class.resource-policy.nri.io": "run-when-free"}
    d1 = p.allocate(d0.state, bctr("pod1c0", pod="pod1", milli=3000, ann=ann))
    assert d1.assignment is not None
    pod1 = adjustment_for(d1.assignment)
    assert kernel_view(pod1) == (SCHED_IDLE, 120 + 17)
    io = pod1.linux.io_priority
    assert (api.IOPrioClass.Name(getattr(io, "class")), io.priority) == ("IOPRIO_CLASS_BE", 6)
