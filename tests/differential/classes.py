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

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import yaml

from nri_resmgr.model import MemoryKind
from nri_resmgr.policy.balloons.sizing import Sizing
from nri_resmgr.policy.topology_aware import TopologyAwarePolicy
from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.model import Topology
from tests.differential.gen import GROUP_LABEL, Ctr, Pod
from tests.differential.plugins import Held, Placement
from tests.differential.shadow import (
    LIMITS_AS_REQUESTS,
    THEIR_KINDS,
    THEIR_RESERVED,
    kind_by_size,
)

__all__ = ["CLASSES", "Context", "DiffClass", "classify"]


@dataclass(frozen=True, slots=True)
class Context:
    """What a class may look at: the machine, the case's configuration (YAML), the
    container, both placements (or refusals) now and after the previous step, whether
    this step restarted the plugins, the other live containers' pods and placements
    (ours, theirs), their specs with our placements (`neighbours`), and where ours
    would hold the container with one rule of theirs, per `shadow.VARIANTS` name
    (`shadow.Shadow`; absent where the variant changes nothing, after a restart and for
    balloons)."""

    machine: Topology
    policy: str
    pod: Pod
    ctr: Ctr
    ours: Held
    theirs: Held
    before: tuple[Held, Held] | None
    after_restart: bool
    config: str = ""
    others: tuple[tuple[Pod, Held, Held], ...] = ()
    neighbours: tuple[tuple[Ctr, Held], ...] = ()
    shadows: Mapping[str, Held] = field(default_factory=dict)


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


def _reserved_capacity_here(c: Context) -> bool:
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


def _reserved_capacity_moved(c: Context) -> bool:
    """Ours, counting the reserved capacity as theirs does (1000m a reserved CPU), holds
    the container exactly as theirs (`shadow.THEIR_RESERVED`), and ours does not: a
    kube-system container of the class took other CPUs on each side, and this one
    followed."""
    if not isinstance(c.theirs, Placement) or c.ours == c.theirs:
        return False
    return c.shadows.get(THEIR_RESERVED) == c.theirs


def _reserved_capacity(c: Context) -> bool:
    """The container of the difference, or one it moved (`_reserved_capacity_here`,
    `_reserved_capacity_moved`)."""
    return _reserved_capacity_here(c) or _reserved_capacity_moved(c)


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


class _HomeKey:
    """A (machine, configuration) pair as a cache key: the machine by identity (a
    `Topology` is not hashable; one run keeps one per machine)."""

    def __init__(self, machine: Topology, config: str) -> None:
        self.machine, self.config = machine, config

    def __hash__(self) -> int:
        return hash((id(self.machine), self.config))

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, _HomeKey)
            and other.machine is self.machine
            and other.config == self.config
        )


@functools.lru_cache(maxsize=64)
def _quantity_home(key: _HomeKey) -> IDSet | None:
    """The reserved balloon's home when ``reservedResources`` is a quantity (our CPU
    tree's pick in the initial state, which theirs makes too), else None."""
    sizing = Sizing(topology=key.machine, config=yaml.safe_load(key.config))
    if sizing.config.reserved:
        return None
    return IDSet(sizing.reserved_home)


def _reserved_home(c: Context) -> bool:
    """A reserved-balloon (kube-system) container whose balloon has as many CPUs on both
    sides but other ones, ours holding its whole home (`reservedResources` a quantity):
    ours gives CPUs back off its home (the CPUs it started on), theirs by its CPU tree
    alone. Nothing else makes such a difference: the home hint leaves growing alone (the
    home CPUs are the balloon's already), so equal histories grow alike; a balloon that
    once deflated differently stays different through later growth, even after the
    container that grew it (an init container) is gone, which is why this needs no
    deflation at this very step."""
    if c.pod.namespace != "kube-system" or not c.config:
        return False
    if not (isinstance(c.ours, Placement) and isinstance(c.theirs, Placement)):
        return False
    ours, theirs = IDSet.parse(c.ours.cpus), IDSet.parse(c.theirs.cpus)
    if ours == theirs or len(ours) != len(theirs):
        return False
    home = _quantity_home(_HomeKey(c.machine, c.config))
    return bool(home) and home is not None and home <= ours


def _group_of(pod: Pod) -> str | None:
    return dict(pod.labels).get(GROUP_LABEL)


def _groupby_apart(c: Context) -> bool:
    """A container of a ``groupBy`` configuration that theirs puts in one balloon (the
    very same cpuset) with a container of another group, where ours keeps it apart
    (its cpuset is no other group's)."""
    if "groupBy:" not in c.config or _group_of(c.pod) is None:
        return False
    if not (isinstance(c.ours, Placement) and isinstance(c.theirs, Placement)):
        return False
    group = _group_of(c.pod)
    other = [(o, t) for p, o, t in c.others if _group_of(p) not in (None, group)]
    mixed_there = any(t == c.theirs for _o, t in other)
    mixed_here = any(o == c.ours for o, _t in other)
    return mixed_there and not mixed_here


def _memory_kind_by_size(c: Context) -> bool:
    """Theirs names a CPU-less node otherwise by its size (`shadow.kind_by_size`), and
    that alone explains the difference: either the CPUs are the same and the memory
    nodes differ only by such nodes, or ours, given their names for the nodes, holds the
    container exactly as theirs does (`shadow.THEIR_KINDS`: the kinds decide which
    pool's memory suits a container, so the CPUs follow them, and every later container
    with them)."""
    if not isinstance(c.theirs, Placement) or c.ours == c.theirs:
        return False
    if c.shadows.get(THEIR_KINDS) == c.theirs:
        return True
    if not isinstance(c.ours, Placement):
        return False
    if c.ours.cpus != c.theirs.cpus or c.ours.mems == c.theirs.mems:
        return False
    ours, theirs = IDSet.parse(c.ours.mems), IDSet.parse(c.theirs.mems)
    return ((ours - theirs) | (theirs - ours)) <= kind_by_size(c.machine)


def _burstable_memory_by_limit(c: Context) -> bool:
    """Ours, counting every Burstable container's memory limit as its memory where its
    request is unknown (as theirs reserves it), holds the container exactly as theirs
    does (`shadow.LIMITS_AS_REQUESTS`), and ours does not: the limits that fill a node
    there are what moved it."""
    if not isinstance(c.theirs, Placement) or c.ours == c.theirs:
        return False
    return c.shadows.get(LIMITS_AS_REQUESTS) == c.theirs


#: nri-plugins' refusal when no memory offer can be made for a request (their libmem
#: finds every zone overcommitted, with or without its own reason appended)
_NO_MEMORY_OFFER = "failed to get offer for request"


def _estimated(pod: Pod) -> bool:
    """A Burstable pod with a container whose memory request is unknown (theirs
    estimates one from the OOM score adjustment)."""
    return pod.qos == "burstable" and any(c.memory_request is None for c in pod.containers)


def _burstable_memory_refused(c: Context) -> bool:
    """Theirs refuses a container for memory (no memory offer: their libmem finds the
    zones overcommitted) that ours runs, where the memory is theirs' estimate of a
    Burstable container's: the container's own (a Burstable one without a known memory
    request), or, for another container, that of a live Burstable pod's."""
    if not (isinstance(c.ours, Placement) and isinstance(c.theirs, str)):
        return False
    if _NO_MEMORY_OFFER not in c.theirs:
        return False
    if c.pod.qos == "burstable" and c.ctr.memory_request is None:
        return True
    return any(_estimated(p) for p, _o, t in c.others if isinstance(t, Placement))


#: the per-container annotation naming the memory kinds a container asks for
_MEMORY_TYPE = "memory-type.resource-policy.nri.io/container."


def _memory_type_by_size(c: Context) -> bool:
    """Balloons: same CPUs; the container asks a memory kind by annotation on a machine
    with CPU-less nodes whose kind their size rule names otherwise (`shadow.kind_by_size`), and
    the memory nodes differ only by such nodes and the CPU nodes (theirs falls back to
    the balloon's nodes when no node has the kind by its rule)."""
    if not (isinstance(c.ours, Placement) and isinstance(c.theirs, Placement)):
        return False
    if c.ours.cpus != c.theirs.cpus or c.ours.mems == c.theirs.mems:
        return False
    asked = dict(c.pod.annotations).get(_MEMORY_TYPE + c.ctr.name, "")
    if not {"pmem", "hbm"} & set(asked.split(",")):
        return False
    mismatched = kind_by_size(c.machine)
    if not mismatched:
        return False
    ours, theirs = IDSet.parse(c.ours.mems), IDSet.parse(c.theirs.mems)
    cpu_nodes = IDSet(c.machine.node_ids(with_cpus=True))
    return ((ours - theirs) | (theirs - ours)) <= mismatched | cpu_nodes


def _mems(held: Held) -> IDSet:
    return IDSet.parse(held.mems) if isinstance(held, Placement) else IDSet()


def _zone_limits_overcommit(c: Context) -> bool:
    """Balloons: same CPUs; a container of a Burstable pod whose memory nodes theirs
    widened beyond ours, where the memory limits of the containers ours holds on its
    nodes (its own included) exceed those nodes' memory while their requests do not
    (their libmem counts a container's limit as its amount and moves Burstable
    containers' zones out of an overcommitted one, `defaultHandleOvercommit`)."""
    if not (isinstance(c.ours, Placement) and isinstance(c.theirs, Placement)):
        return False
    if c.pod.qos != "burstable":
        return False
    ours, theirs = _mems(c.ours), _mems(c.theirs)
    if c.ours.cpus != c.theirs.cpus or not ours or not ours < theirs:
        return False
    here = [c.ctr, *(ctr for ctr, held in c.neighbours if _mems(held) & ours)]
    limits = sum(ctr.memory_limit or 0 for ctr in here)
    requests = sum(ctr.memory_request or 0 for ctr in here)
    capacity = sum(c.machine.node(n).memory_bytes for n in ours)
    return requests <= capacity < limits


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
        "burstable-memory-by-limit",
        "topology-aware",
        "Burstable memory limits fill a node there (no request known), not here",
        _burstable_memory_by_limit,
    ),
    DiffClass(
        "burstable-memory-refused",
        "topology-aware",
        "a Burstable container with no memory request: refused there for memory, run here",
        _burstable_memory_refused,
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
    DiffClass(
        "reserved-deflates-home",
        "balloons",
        "the reserved balloon deflates back onto its home CPUs here, by the CPU tree there",
        _reserved_home,
    ),
    DiffClass(
        "memory-kind-by-size",
        "balloons",
        "same CPUs; a memory-type annotation's nodes differ by nodes theirs kinds by size",
        _memory_type_by_size,
    ),
    DiffClass(
        "burstable-memory-by-limit",
        "balloons",
        "Burstable memory limits overcommit the nodes: the zone widened there, not here",
        _zone_limits_overcommit,
    ),
    DiffClass(
        "groupby-apart",
        "balloons",
        "a groupBy balloon takes no container of another group here; theirs mixes them",
        _groupby_apart,
    ),
)


def classify(c: Context) -> str | None:
    """The documented class of a divergence, or None."""
    for cls in CLASSES:
        if cls.policy == c.policy and cls.holds(c):
            return cls.name
    return None
