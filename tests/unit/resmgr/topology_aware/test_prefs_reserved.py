"""Reserved-CPU annotations and the global shared preference, as nri-plugins tests them.

The machine is nri-plugins' n4c16 in our numbering (see `test_prefs_priority`); their
node2 cpu08-cpu11 (cores 8,9 and 10,11) is our node2 4-5,12-13 (cores 4,12 and 5,13).
"""

from __future__ import annotations

from nri_resmgr.model import ContainerInfo, CPUKind
from nri_resmgr.policy.topology_aware import TopologyAwarePolicy, TopologyAwareState
from nri_resmgr.policy.topology_aware.preferences import ALL_MEMORY as ALL
from nri_resmgr.policy.topology_aware.preferences import (
    CPU_PRESERVE,
    HIDE_HYPERTHREADS,
    MEMORY_PRESERVE,
    PREFER_RESERVED,
    PREFER_SHARED,
)
from nri_resmgr.topology.cpuset import IDSet
from tests.support.builders import ctr, small

#: their AVAILABLE_CPU="cpuset:8-11", RESERVED_CPU="cpuset:10-11"
TEST11 = {
    "availableResources": {"cpu": "cpuset:4-5,12-13"},
    "reservedResources": {"cpu": "cpuset:5,13"},
}


def allocate(
    p: TopologyAwarePolicy, s: TopologyAwareState, c: ContainerInfo
) -> tuple[TopologyAwareState, tuple[str, str, CPUKind]]:
    d = p.allocate(s, c)
    p.check(d.state)
    assert d.assignment is not None
    return d.state, (str(d.assignment.cpus), str(d.assignment.mems), d.assignment.kind)


def test_reserved_cpu_annotations() -> None:
    """n4c16/test11-reserved-cpu-annotations, pods 0-3."""
    p = TopologyAwarePolicy(topology=small(), config=TEST11)
    s = p.initial_state()
    # pod0: prefer-reserved on the pod: both reserved CPUs (their cpu10, cpu11)
    pod0 = ctr("pod0c0", pod="pod0", milli=1000, ann={f"{PREFER_RESERVED}/pod": "true"})
    s, got = allocate(p, s, pod0)
    assert got[0] == "5,13" and got[2] is CPUKind.RESERVED
    # pod1: the false annotation names another container: an exclusive CPU (their cpu08)
    pod1 = ctr(
        "pod1c0", pod="pod1", milli=1000, ann={f"{PREFER_RESERVED}/container.special": "false"}
    )
    s, got = allocate(p, s, pod1)
    assert got[0] == "4"
    s = p.release(s, pod0.id).state
    # pod2: reserved with hidden hyperthreads: one thread of the reserved core (cpu10)
    hide = {f"{PREFER_RESERVED}/pod": "true", f"{HIDE_HYPERTHREADS}/pod": "true"}
    pod2 = ctr("pod2c0", pod="pod2", milli=1000, ann=hide)
    s, got = allocate(p, s, pod2)
    assert got[0] == "5"
    # pod3: cpu.preserve / memory.preserve at pod and container scope (100m each)
    ann = {
        CPU_PRESERVE: "true",
        f"{MEMORY_PRESERVE}/container.pod3c1": "true",
        f"{MEMORY_PRESERVE}/container.pod3c2": "true",
        f"{CPU_PRESERVE}/container.pod3c2": "false",
        f"{CPU_PRESERVE}/container.pod3c3": "false",
        f"{MEMORY_PRESERVE}/container.pod3c3": "false",
    }
    got3 = {}
    for i in range(4):
        c = ctr(f"pod3c{i}", pod="pod3", milli=100, mem=100 << 20, ann=ann)
        s, got3[c.name] = allocate(p, s, c)
    # "" = left alone: the runtime's own (all 16 CPUs / all 4 nodes in their test)
    # CPUs left alone; memory pinned to every node of the machine (their 4), though
    # availableResources narrows the CPUs (and so our root pool) to one node
    assert len(p.tree.root.mems_of(ALL)) < 4
    assert got3["pod3c0"] == ("", "0-3", CPUKind.NONE)
    assert got3["pod3c1"][:2] == ("", "")
    assert len(IDSet.parse(got3["pod3c2"][0])) == 1 and got3["pod3c2"][1] == ""
    assert len(IDSet.parse(got3["pod3c3"][0])) == 1
    assert len(IDSet.parse(got3["pod3c3"][1])) == 1


def test_global_shared_preference() -> None:
    """n4c16/test14-global-shared-preference: preferSharedCPUs true, opted out by
    annotation."""
    p = TopologyAwarePolicy(topology=small(), config={"preferSharedCPUs": True})
    s = p.initial_state()
    for name, milli in (("pod0", 1000), ("pod1", 2000)):
        s, got = allocate(p, s, ctr(f"{name}c0", pod=name, milli=milli))
        assert got[2] is CPUKind.SHARED and len(IDSet.parse(got[0])) > 1
    s = p.initial_state()
    opt_out = {f"{PREFER_SHARED}/pod": "false"}
    s, got = allocate(p, s, ctr("pod2c0", pod="pod2", milli=1000, ann=opt_out))
    assert len(IDSet.parse(got[0])) == 1
    s, got = allocate(p, s, ctr("pod3c0", pod="pod3", milli=2000, ann=opt_out))
    assert len(IDSet.parse(got[0])) == 2
