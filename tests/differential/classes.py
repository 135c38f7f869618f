"""The documented difference classes: which divergences from nri-plugins are on purpose.

Theory of operation: a divergence (one container whose placement differs after a step) is
a failure unless it belongs to a class listed here. Each `DiffClass` names one bullet of
a policy's "Differences from nri-plugins" section in docs/policies.md (the bullet carries
``(differential class `NAME`)``; `tests/differential/test_classes.py` checks that the
classes here and the markers there are the same set, per policy) and a predicate over the
`Context` of the divergence that recognises exactly that difference, no more: a predicate
names the container kind, the side that differs and how, so a class is no free pass for
other divergences on the same container. Each class has a test there showing one case
it recognises and a near miss it does not.

`classify` returns the first class whose predicate holds, or None.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from nri_resmgr.model import MemoryKind
from nri_resmgr.policy.topology_aware import TopologyAwarePolicy
from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.model import Topology
from tests.differential.gen import Ctr, Pod
from tests.differential.plugins import Held, Placement

__all__ = ["CLASSES", "Context", "DiffClass", "classify"]


@dataclass(frozen=True, slots=True)
class Context:
    """What a class may look at: the machine, the container, both placements (or
    refusals) now and after the previous step, and whether this step restarted the
    plugins."""

    machine: Topology
    policy: str
    pod: Pod
    ctr: Ctr
    ours: Held
    theirs: Held
    before: tuple[Held, Held] | None
    after_restart: bool


@dataclass(frozen=True, slots=True)
class DiffClass:
    name: str
    policy: str
    doc: str  # one line: what differs
    holds: Callable[[Context], bool]


def _shared_refused(c: Context) -> bool:
    """Ours refuses a shared container (one not asking for whole CPUs) that theirs leaves
    unpinned: on every online CPU, or with no cpuset at all."""
    shared = c.ctr.cpu_limit != c.ctr.cpu_request or c.ctr.cpu_request % 1000 != 0
    if not (shared and isinstance(c.ours, str) and isinstance(c.theirs, Placement)):
        return False
    return c.theirs.cpus in ("", str(c.machine.online_cpus()))


def _restart_keeps(c: Context) -> bool:
    """A restart: ours keeps the container where it was, theirs moves it."""
    if not c.after_restart or c.before is None:
        return False
    ours_before, theirs_before = c.before
    return (
        c.ours == ours_before
        and c.theirs != theirs_before
        and ours_before == theirs_before
    )


def _maxcpus_honoured(c: Context) -> bool:
    """Ours refuses a container no balloon can take within maxCPUs; theirs puts it in a
    balloon clamped at maxCPUs (it counts every free CPU as room when maxCPUs is more)."""
    return (
        isinstance(c.ours, str)
        and "maxCPUs is" in c.ours
        and isinstance(c.theirs, Placement)
        and bool(c.theirs.cpus)
    )


#: the topology-aware configuration of the runs (`machines.TA_CONFIG`): 750m reserved
RESERVED_MILLI = 750


def _reserved_cpus(topo: Topology) -> IDSet:
    """The reserved CPUs both sides pick for `RESERVED_MILLI` on `topo` (their allocator's
    pick; ours follows it)."""
    config = {"reservedResources": {"cpu": f"{RESERVED_MILLI}m"}}
    return TopologyAwarePolicy(topology=topo, config=config).config.reserved


def _reserved_capacity(c: Context) -> bool:
    """A kube-system container asking more than the reserved millicores but no more than
    1000m per reserved CPU: theirs runs it on the reserved CPUs (their capacity is 1000m
    a CPU, their #632), ours on the root pool's shared CPUs (750m is 750m)."""
    if c.pod.namespace != "kube-system" or not isinstance(c.theirs, Placement):
        return False
    if not isinstance(c.ours, Placement) or c.ours.cpus == c.theirs.cpus:
        return False
    reserved = _reserved_cpus(c.machine)
    asked = c.ctr.cpu_request
    return RESERVED_MILLI < asked <= 1000 * len(reserved) and c.theirs.cpus == str(reserved)


def _cxl_memory(c: Context) -> bool:
    """Same CPUs; their memory nodes add CPU-less nodes ours calls CXL (theirs calls every
    CPU-less node PMEM or HBM by its size, so a CXL expander is default memory there)."""
    if not (isinstance(c.ours, Placement) and isinstance(c.theirs, Placement)):
        return False
    if c.ours.cpus != c.theirs.cpus or c.ours.mems == c.theirs.mems:
        return False
    cxl = c.machine.nodes_of_kind(MemoryKind.CXL)
    ours, theirs = IDSet.parse(c.ours.mems), IDSet.parse(c.theirs.mems)
    return bool(theirs - ours) and theirs - ours <= cxl and ours <= theirs


def _kind_by_size(machine: Topology) -> IDSet:
    """The CPU-less nodes whose kind nri-plugins' size rule names otherwise than ours:
    theirs calls one HBM when smaller than the average DRAM node, else PMEM (their sysfs
    ``system.go``); ours asks the firmware first (NVDIMM regions, HMAT bandwidth)."""
    dram = [machine.node(n).memory_bytes for n in machine.node_ids(with_cpus=True)]
    average = sum(dram) / max(1, len(dram))
    out = set()
    for n in machine.node_ids(with_cpus=False):
        node = machine.node(n)
        theirs = MemoryKind.HBM if node.memory_bytes < average else MemoryKind.PMEM
        if node.kind in (MemoryKind.PMEM, MemoryKind.HBM) and node.kind is not theirs:
            out.add(n)
    return IDSet(out)


def _memory_kind_by_size(c: Context) -> bool:
    """Same CPUs; the memory nodes differ only by CPU-less PMEM or HBM nodes whose kind
    their size rule names otherwise than ours (`_kind_by_size`)."""
    if not (isinstance(c.ours, Placement) and isinstance(c.theirs, Placement)):
        return False
    if c.ours.cpus != c.theirs.cpus or c.ours.mems == c.theirs.mems:
        return False
    ours, theirs = IDSet.parse(c.ours.mems), IDSet.parse(c.theirs.mems)
    return ((ours - theirs) | (theirs - ours)) <= _kind_by_size(c.machine)


CLASSES: tuple[DiffClass, ...] = (
    DiffClass(
        "shared-refused",
        "topology-aware",
        "a shared container finding no shared CPU: refused here, run elsewhere there",
        _shared_refused,
    ),
    DiffClass(
        "restart-keeps-placements",
        "topology-aware",
        "after a restart ours keeps a container where both had it, theirs moves it",
        _restart_keeps,
    ),
    DiffClass(
        "reserved-capacity",
        "topology-aware",
        "a kube-system container above 750m but within a reserved CPU: root shared here",
        _reserved_capacity,
    ),
    DiffClass(
        "cxl-memory",
        "topology-aware",
        "same CPUs; theirs adds CPU-less CXL nodes to the memory nodes",
        _cxl_memory,
    ),
    DiffClass(
        "memory-kind-by-size",
        "topology-aware",
        "same CPUs; the memory differs by CPU-less nodes theirs calls HBM or PMEM by size",
        _memory_kind_by_size,
    ),
    DiffClass(
        "restart-keeps-placements",
        "balloons",
        "after a restart ours keeps a container where both had it, theirs moves it",
        _restart_keeps,
    ),
    DiffClass(
        "maxcpus-honoured",
        "balloons",
        "a container beyond every balloon's maxCPUs: refused here, overcommitted there",
        _maxcpus_honoured,
    ),
)


def classify(c: Context) -> str | None:
    """The documented class of a divergence, or None."""
    for cls in CLASSES:
        if cls.policy == c.policy and cls.holds(c):
            return cls.name
    return None
