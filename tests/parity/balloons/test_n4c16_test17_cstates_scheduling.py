"""n4c16/test17-cstates-scheduling: a low-latency balloon inflating and deflating within
``availableResources``, the C-states of its CPUs, and the scheduling class each container
is created with.

The C-state half runs on a synthetic sysfs tree with their override's states (C1E, C2,
C4, C8 on CPUs 0-15) and checks the ``cpuidle/stateK/disable`` files where they check the
last write to each: disabled C4/C8 on the low-latency balloon's CPUs, everything enabled
on the idle ones, and nothing written outside ``availableResources``.  The tree starts
with every state disabled, so an enabled state is one the policy wrote and a CPU it must
not touch shows it never did.  Each check is on a fresh tree after the steps up to it.

Their scheduling checks read ``policy`` and ``prio`` from the started process's
/proc/PID/sched and its ``ionice``; here the same numbers come from the creation
adjustment the daemon sends (`runtime.adjustments.adjustment_for`), turned into what the
kernel shows by `kernel_view` (real-time: 99 - priority; others: 120 + nice).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from nri_api import api
from nri_resmgr.control.cpuclass.synthetic import CPUFreqLayout, write_cpu_class_tree
from nri_resmgr.policy.balloons import BalloonsPolicy
from nri_resmgr.runtime.adjustments import adjustment_for
from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.load import load_topology
from nri_resmgr.topology.synthetic import write_sysfs
from tests.parity.balloons._sim import BALLOON, N4C16, Run, Script, config, simulate
from tests.parity.ports import port
from tests.parity.verify import cpu_ids
from tests.support.balloons import bctr
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


@port("balloons/n4c16/test17-cstates-scheduling")
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

    v = run.verify(pod0, 'len(cpus["pod0c0"]) == 1')
    assert cpu_ids(v.cpus["pod0c0"]) <= set(AVAILABLE)  # ours beside theirs
    # inflated to 4 for 0.75 + 3 CPUs
    v = run.verify(pod1, 'cpus["pod0c0"] == cpus["pod1c0"]', 'len(cpus["pod0c0"]) == 4')
    assert cpu_ids(v.cpus["pod0c0"]) <= set(AVAILABLE)
    run.verify(gone, 'len(cpus["pod0c0"]) == 1')  # deflated again


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


STATES = ("C1E", "C2", "C4", "C8")  # their OVERRIDE_SYS_CSTATES names


def enabled(cpu_dir: Path, cpu: int) -> set[str]:
    """The C-states of `cpu` whose ``disable`` file holds 0."""
    d = cpu_dir / f"cpu{cpu}" / "cpuidle"
    return {
        (d / f"state{i}" / "name").read_text().strip()
        for i in range(len(STATES))
        if (d / f"state{i}" / "disable").read_text().strip() == "0"
    }


def run_with_files(
    script: Script, steps: int
) -> tuple[Run, Path, tempfile.TemporaryDirectory[str]]:
    """The first `steps` steps of `script` with CPU class files on a fresh tree whose
    C-states start all disabled."""
    tmp = tempfile.TemporaryDirectory(prefix="test17-")
    topo = write_sysfs(N4C16, tmp.name)
    cpu_dir = write_cpu_class_tree(tmp.name, topo, CPUFreqLayout(cstates=STATES))
    for f in cpu_dir.glob("cpu*/cpuidle/state*/disable"):
        f.write_text("1\n")
    prefix = Script(steps=script.steps[:steps], pods=script.pods)
    return simulate(prefix, CONFIG, sysfs_root=tmp.name), cpu_dir, tmp


def test_cstates_of_lowlatency_and_idle_cpus() -> None:
    s = Script()
    low = {BALLOON: "lowlatency-bln"}
    s.create(annotations=low, cpureq="750m", cpulim="750m", memreq="100M")
    s.create(
        annotations={**low, "scheduling-class.resource-policy.nri.io": "run-when-free"},
        cpureq="3", memreq="100M",
    )  # fmt: skip
    s.delete("pod1")
    s.delete("pod0")
    outside = IDSet.parse("0-1,8-9,14-15")

    run, cpu_dir, tmp = run_with_files(s, 1)
    with tmp:
        pod0 = run.at(0).cpus("pod0c0")
        reserved = next(b for b in run.result.steps[0].balloons if b.type == "reserved")
        idle = AVAILABLE - pod0 - IDSet.parse(reserved.cpus)
        assert len(idle) == 8
        # "all c-states of all available CPUs are enabled" (the idle class has none off)
        assert all(enabled(cpu_dir, c) == set(STATES) for c in idle)
        # "CPUs of low-latency pod0 cannot enter C4 or C8"
        assert all(enabled(cpu_dir, c) == {"C1E", "C2"} for c in pod0)
        # "c-states of CPUs outside AvailableResources have not been written"
        assert all(enabled(cpu_dir, c) == set() for c in outside)

    run, cpu_dir, tmp = run_with_files(s, 2)
    with tmp:
        lowlatency = run.at(1).cpus("pod1c0")
        assert len(lowlatency) == 4
        assert all(enabled(cpu_dir, c) == {"C1E", "C2"} for c in lowlatency)

    run, cpu_dir, tmp = run_with_files(s, 3)
    with tmp:
        pod0 = run.at(2).cpus("pod0c0")
        freed = lowlatency - pod0
        assert len(freed) == 3
        # "all c-states of freed CPUs are enabled after the balloon got deflated"
        assert all(enabled(cpu_dir, c) == set(STATES) for c in freed)
        # "c-states of the remaining CPU are still configured for low-latency"
        assert all(enabled(cpu_dir, c) == {"C1E", "C2"} for c in pod0)

    run, cpu_dir, tmp = run_with_files(s, 4)
    with tmp:
        # "after all containers are gone, c-states of all used CPUs are enabled again"
        assert all(enabled(cpu_dir, c) == set(STATES) for c in lowlatency)
        assert all(enabled(cpu_dir, c) == set() for c in outside)
