"""The balloons policy: containers in balloons of CPUs that inflate and deflate.

Theory of operation: the configuration (`config.resolve_config`) lists balloon types;
`matching.balloon_type_of` picks a container's type.  A type has instances, *balloons*
(`state.Balloon`), each with its own CPUs; ``minBalloons`` of each are there from the
start (`initial_state`), up to ``maxBalloons`` (0: no limit) are created as containers
need them, and those beyond ``minBalloons`` go away when their last container does.

Choosing the instance for a container follows nri-plugins' fill chain, in order
(`_fill_chain`): the balloon of the container's ``groupBy`` group; unless
``preferSpreadingPods``, a balloon holding the container's pod; with
``preferPerNamespaceBalloon`` a balloon of its namespace, else a new one; then with
``preferNewBalloons`` new, balanced, balanced-inflate, and otherwise balanced,
balanced-inflate, new.  *Balanced* is an existing balloon with room for the request as
it is, *balanced-inflate* one that can grow to fit; *new* takes an empty balloon of the
type before it makes one.  Among the candidates of a step the one with the most free
millicores wins (as it is; for balanced-inflate, inflated as far as free CPUs and
``maxCPUs`` let it), then the one with fewest containers, then the one made first.  A
balloon with members of another group is never a candidate.

A balloon's size is ``max(minCPUs, ceil(sum of its members' CPU requests))``, and at least
one CPU while it has containers (best-effort ones too), at most ``maxCPUs`` (0: no
limit): it inflates and deflates as containers come and go (`_resize`).  A new balloon
is made at its ``minCPUs`` and then inflated for its first container, as nri-plugins
does: the second pick grows near the first, which sizing it at once would not.
Which CPUs it takes and gives back is `allocation`'s rule (nri-plugins' CPU tree; the
sort keys are in its docstring): near the balloon's own CPUs first, then packed or, with
``allocatorTopologyBalancing``, balanced over the topology, one thread per core first
with ``preferSpreadOnPhysicalCores``, and ``allocatorPriority`` high/low for
performance/efficient cores.  `_tree_options` gives each type its hints: the reserved
balloon keeps to its home (`reserved_home`: the ``reservedResources`` cpuset, or for a
quantity the CPUs the tree gives it in the initial state, as nri-plugins places it, not
the lowest ones; it deflates back onto them and a rebuild finds them again), a type to
its ``preferCloseToDevices`` devices, then ``preferIsolCpus`` to the isolated CPUs and
``preferCoreType`` to those cores; it keeps off its ``preferFarFromDevices`` devices and
then off each of those sets it does not want (the isolated CPUs first; the reserved CPUs
only when given as a cpuset), as nri-plugins adds them, while enough other CPUs are
free.  Last, a type with ``loads`` keeps off the CPUs under load (`_loaded`: at each
level its load classes name, the domains of every balloon loading that level); with
``overloadsLevelInBalloon`` it takes its CPUs one at a time, each loading its own
domains.  A deflating balloon keeps the CPUs close to its devices.  The devices' CPUs
come from the topology (`config.resolve_config` looks each path up with
`nri_resmgr.topology.locality`, from what discovery read): the policy reads no sysfs.

A *composite* balloon (its type has ``components``) has no CPUs of its own choosing: it
holds the union of its component balloons' CPUs (`state.Balloon.components`), new
instances of the component types made for it alone, each picking CPUs by its own type's
preferences; a component may be composite too.  With ``componentCreation: all`` (the
default) a new composite gets one component of every component type; with
``balance-balloons`` only one, of the component type with the fewest instances of itself
and the types it is made of, top-level or inside composites, the first one listed on a
tie (`_component_types`).  Sizes follow nri-plugins: each component is sized for an
equal share, rounded down, of ``max(requests, 1000 * minCPUs)`` (`component_share`), so
a composite's size is the sum of its components' (`needed_cpus`; while it has
containers each component has at least one CPU, as a plain balloon does); a size beyond
the ``maxCPUs`` of the composite or of any component fails.  A composite and its
components count as one balloon: they go when the composite does, and a component type's
``minBalloons``/``maxBalloons`` count only its own top-level balloons.

A container runs on its balloon's CPUs, plus the idle CPUs (in no balloon) it shares
with ``shareIdleCPUsInSame``: as in nri-plugins these are state (`state.Balloon.shared`,
`share_idle`), not recomputed: after an inflation every balloon shares the idle CPUs of
its domains, after a deflation the CPUs given back join the balloons near them, a
deleted balloon's last CPUs wait for the next inflation, a shared CPU leaves only when a
balloon takes it, and kernel-isolated CPUs are never shared.  An empty balloon with no
CPUs is reported with the reserved balloon's CPUs.  ``hideHyperthreads`` (or the
annotation) keeps one thread per core; memory is pinned (``pinMemory``) to the nodes of
those CPUs, of the ``memoryTypes`` kinds (or the ``memory-type`` annotation's), as the
container's memory zone when it joins; as its balloon changes the zone only widens
(`memzone`, nri-plugins' libmem reallocation; `_follow_mems`).

A new container is created with a scheduling class (`sched_classes`: Linux scheduling
policy, priority, nice, I/O priority): the one its ``scheduling-class`` annotation names,
else its balloon type's ``schedulingClass``.

Interrupts follow the balloons (`irq_use`, planned by `irq_affinity.plan_affinities`, written
by `nri_resmgr.control.irq`): a type's ``irqClaim`` sends the interrupts it names to its
balloons' CPUs, ``irqMode: sink`` balloons take every other interrupt, and ``irqMode:
isolate`` balloons' CPUs are kept out of interrupts neither claimed nor sunk;
``controllableInterrupts`` limits which interrupts may be touched at all.

Containers with ``cpu.preserve`` (or matching ``preserve.matchExpressions``) are in no
balloon and get an empty assignment (left alone); ``memory.preserve`` leaves the memory
nodes alone.

Every decision's updates are the other containers whose rendered CPUs or memory changed
(`decide.decide`): only the members of balloons whose view changed are rendered.
``rebuild`` first replays nri-plugins' restart: the initial state with every container
allocated again in the order given; when that puts each where it reports it runs, that
is the state (`_replayed`: the balloons own the CPUs they owned, not only show them).
Otherwise it keeps every group of containers that run on the same CPUs in one balloon of
their type claiming those CPUs, when they are free and enough for the balloon as it is
(no inflating); the rest are placed as if new, in the order given (creation order: a
live reconfiguration refills as nri-plugins does, so they may join a balloon with room),
a new balloon keeping what it can of the CPUs its container runs on.  The CPUs a
container reports may include idle ones it shares: where other groups report CPUs of the
same domain, those they do not are the balloon's own and it keeps them, and it keeps a
CPU in each domain it reports.  A claim takes CPUs no other group reports first,
and a ``hideHyperthreads`` balloon takes for the siblings it does not show those another
group's shared idle CPUs show to be held.  A container whose annotations cannot be read
is in the default type, as a plain member, both when it claims and when it is placed
as new (`_rebuild_member`).  A claiming composite spreads the claimed CPUs over its
components by their preferences (`_fill`), and with ``balance-balloons`` takes the
component whose preferred CPUs overlap them most.  The empty balloons of
``minBalloons`` then take CPUs no container reports, first those in domains a claimed
balloon shares idle CPUs in (it would report them were they idle).  The reserved
balloon is made before any claim, at its home (`reserved_home`, where `initial_state`
puts it): no other balloon claims its CPUs, and its containers' claim takes it over,
keeping its CPUs first.  A rebuild from the rendered result moves nothing, nor does a
second one, with one known exception: a ``balance-balloons`` composite without CPUs of
its own cannot show which component it had, and when its component types size the same
share differently the rebuild may give it the other one.

CPU classes: `cpu_class_use` names each balloon's CPUs under its type's ``cpuClass`` and
the available CPUs in no balloon under ``idleCPUClass`` (an empty name: the class
``default`` when ``cpuClasses`` has one), with the definitions; the shell writes them
(`nri_resmgr.control.cpuclass`) after each decision.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from nri_resmgr.model import (
    AllocationError,
    AnnotationError,
    Assignment,
    ContainerID,
    ContainerInfo,
    CPUKind,
    Decision,
    MemoryKind,
)
from nri_resmgr.policy.balloons.allocation import (
    CPUTree,
    Hint,
    TreeOptions,
    grow,
    level_cpus,
    shrink,
)
from nri_resmgr.policy.balloons.config import (
    DEFAULT,
    RESERVED,
    BalloonType,
    ComponentCreation,
    CPUPriority,
    ResolvedConfig,
    TopologyLevel,
    resolve_config,
)
from nri_resmgr.policy.balloons.invariants import check_invariants
from nri_resmgr.policy.balloons.matching import balloon_type_of, evaluate, expand
from nri_resmgr.policy.balloons.memzone import MemZone, realloc
from nri_resmgr.policy.balloons.state import Balloon, BalloonsState, Member
from nri_resmgr.policy.base import Policy
from nri_resmgr.policy.common import one_thread_per_core, parse_bool_annotation, take_cpus
from nri_resmgr.policy.cpu_classes import CPUClassUse
from nri_resmgr.policy.decide import (
    decide,
    decide_release,
    diff_updates,
    nothing_to_release,
)
from nri_resmgr.policy.irq_affinity import IrqBalloon, IrqMode, IrqUse
from nri_resmgr.policy.kit.annotations import (
    CPU_PRESERVE,
    HIDE_HYPERTHREADS,
    MEMORY_PRESERVE,
    parse_memory_types,
)
from nri_resmgr.policy.kit.rebuild import each_once, holders_per_cpu, moved
from nri_resmgr.policy.pool_report import PoolCPUs, balloon_cpus
from nri_resmgr.policy.sched_classes import SchedulingClasses, with_scheduling
from nri_resmgr.topology.cpuset import CPUSet, IDSet, NodeSet, union
from nri_resmgr.topology.model import CoreType, Topology

__all__ = ["BalloonReport", "BalloonView", "BalloonsPolicy"]

#: the class of CPUs whose balloon type (or idleCPUClass) names none, when cpuClasses has it
DEFAULT_CPU_CLASS = "default"
_DRAM = (MemoryKind.DRAM,)
_NO_CPUS: CPUSet = IDSet()


@dataclass(frozen=True, slots=True)
class BalloonView:
    """What a balloon's containers run on: its CPUs plus shared idle ones, its memory."""

    cpus: CPUSet
    mems: NodeSet


@dataclass(frozen=True, slots=True)
class BalloonReport:
    """One balloon, for the simulator, the NRT report and the metrics."""

    name: str
    type: str
    cpus: CPUSet
    shared_idle_cpus: CPUSet
    mems: NodeSet
    containers: tuple[str, ...]
    show_containers_in_nrt: bool
    #: a composite's CPUs per component, nested as nri-plugins' "component cpusets"
    #: zone attribute shows them (``{{0}, {4}}``); "" for a plain balloon
    component_cpus: str = ""
    #: nri-plugins' "excess cpus": the millicores of its CPUs its containers did not
    #: request (the largest request that fits without inflating it)
    excess_milli: int = 0


def _component_cpus(b: Balloon) -> str:
    """nri-plugins' nesting of a composite balloon's component CPUs ("" when plain)."""
    if not b.components:
        return ""
    inner = (_component_cpus(c) or f"{{{c.cpus}}}" for c in b.components)
    return "{" + ", ".join(inner) + "}"


def _ceil_cpus(milli: int) -> int:
    return -(-milli // 1000)


class BalloonsPolicy(Policy[BalloonsState]):
    """nri-plugins' balloons policy, as pure functions (module docstring)."""

    name: ClassVar[str] = "balloons"

    def __init__(self, *, topology: Topology, config: Mapping[str, Any]) -> None:
        self.topology = topology
        self.config: ResolvedConfig = resolve_config(topology, config)
        self.types: dict[str, BalloonType] = {t.name: t for t in self.config.types}
        self.tree = CPUTree.of(topology)
        #: the reserved balloon's home: the CPUs ``reservedResources`` names, or for a
        #: quantity those the CPU tree gives it in the initial state (`_reserved_home`)
        self.reserved_home: CPUSet = self.config.reserved
        self.tree_options = self._tree_options()
        if not self.reserved_home:
            self.reserved_home = self._reserved_home()
            self.tree_options = self._tree_options()
        #: the balloons of the initial state, in order, and their CPUs: a rebuild makes
        #: the empty ones there again, when it can, and keeps their order
        initial = self._initial()
        self.initial_homes: dict[str, CPUSet] = (
            {} if isinstance(initial, str) else {n: b.cpus for n, b in initial.balloons.items()}
        )
        #: the scheduling classes (the contract's `scheduling` hook; the daemon checks them)
        self.scheduling: SchedulingClasses = self.config.scheduling

    # ---- balloon sizes and CPUs ----------------------------------------------------

    def target_cpus(self, t: BalloonType, milli: int, *, occupied: bool) -> int:
        """The CPUs a balloon of type `t` needs for `milli` requested millicores; an
        `occupied` one (with containers) at least one, even for best-effort ones."""
        return max(t.min_cpus, _ceil_cpus(milli), 1 if occupied else 0)

    def needed_cpus(self, b: Balloon, milli: int, *, occupied: bool) -> int:
        """The CPUs balloon `b` needs for `milli` requested millicores: `target_cpus`
        when plain; a composite's is the sum of its components' (`component_share`)."""
        if not b.components:
            return self.target_cpus(self.types[b.type], milli, occupied=occupied)
        share = self.component_share(b, milli)
        return sum(self.needed_cpus(c, share, occupied=occupied) for c in b.components)

    def component_share(self, b: Balloon, milli: int) -> int:
        """The millicores each component of composite `b` is sized for when `b` holds
        `milli`: an equal share (rounded down) of ``max(milli, 1000 * minCPUs)``."""
        return max(milli, 1000 * self.types[b.type].min_cpus) // len(b.components)

    def _reserved_home(self) -> CPUSet:
        """The CPUs of the reserved balloon in the initial state, as the CPU tree picks
        them when ``reservedResources`` is a quantity (nri-plugins gives its reserved
        type no preferred CPUs then); empty when there is no initial state."""
        st = self._initial()
        if isinstance(st, str):
            return IDSet()  # initial_state says why
        return union(b.cpus for b in st.of_type(RESERVED))

    def _tree_options(self) -> dict[str, TreeOptions]:
        """Every type's `allocation.TreeOptions`: the option values, its own or the
        policy's, and its hints, as nri-plugins derives them: a type is close to the
        sets it asks for (the reserved type to its home, `reserved_home`, then its
        ``preferCloseToDevices``, ``preferIsolCpus`` to the isolated CPUs,
        ``preferCoreType`` to those cores) and far from its ``preferFarFromDevices``,
        then from every such set it does not ask for, isolated CPUs first, then in the
        order the types name them; from the reserved CPUs only when
        ``reservedResources`` names them (a cpuset).  Its ``loads`` give the levels it
        keeps off the CPUs under load at (`_loaded`)."""
        topo = self.topology
        opts = self.config.options
        available = self.config.available
        sets: dict[str, CPUSet] = {
            "reserved": self.reserved_home,
            "isolated": topo.isolated_cpus() & available,
            CoreType.PERFORMANCE: topo.core_type_cpus(CoreType.PERFORMANCE) & available,
            CoreType.EFFICIENT: topo.core_type_cpus(CoreType.EFFICIENT) & available,
        }
        # devices by their sysfs paths, which no name above is
        sets |= {path: cpus & available for path, cpus in self.config.devices.items()}
        close: dict[str, list[str]] = {}
        for t in self.config.types:
            wanted = []
            if t.name == RESERVED:
                wanted.append("reserved")
            wanted += t.prefer_close_to_devices
            if t.prefer_isol_cpus:
                wanted.append("isolated")
            if t.prefer_core_type in (CoreType.PERFORMANCE, CoreType.EFFICIENT):
                wanted.append(t.prefer_core_type)
            close[t.name] = [d for d in wanted if sets[d]]
        avoided = ["isolated"] if sets["isolated"] else []
        for names in close.values():
            avoided += [d for d in names if d not in avoided]
        if not self.config.reserved:
            # a quantity: the reserved balloon keeps to its home, others may take it
            avoided = [d for d in avoided if d != "reserved"]
        out = {}
        for t in self.config.types:
            far = [d for d in t.prefer_far_from_devices if sets[d]]
            far += [d for d in avoided if d not in close[t.name] and d not in far]
            hints = [Hint(sets[d]) for d in close[t.name]]
            hints += [Hint(sets[d], far=True) for d in far]
            loads = [self.config.load_classes[name] for name in t.loads]
            prefer: tuple[CPUSet, ...] = ()
            if t.allocator_priority is CPUPriority.HIGH:
                prefer = (sets[CoreType.PERFORMANCE],)
            elif t.allocator_priority is CPUPriority.LOW:
                prefer = (sets[CoreType.EFFICIENT],)
            balancing = t.allocator_topology_balancing
            spread = t.prefer_spread_on_physical_cores
            out[t.name] = TreeOptions(
                balancing=opts.allocator_topology_balancing if balancing is None else balancing,
                spread=opts.prefer_spread_on_physical_cores if spread is None else spread,
                hints=tuple(hints),
                prefer=prefer,
                loads=tuple(dict.fromkeys(lc.level for lc in loads)),
                overloads=any(lc.overloads_level_in_balloon for lc in loads),
            )
        return out

    def share_idle(
        self, state: BalloonsState, *, add: CPUSet, remove: CPUSet = _NO_CPUS
    ) -> BalloonsState:
        """`state` with the idle CPUs `add` shared by the balloons whose
        ``shareIdleCPUsInSame`` domains hold them, and `remove` (just taken) shared by
        none: nri-plugins' shareIdleCpus.  Kernel-isolated CPUs are never shared.  A
        balloon keeps what it shares until a balloon takes it, even when it no longer
        has CPUs in that domain."""
        add = add - self.topology.isolated_cpus()
        out = {}
        for name, b in state.balloons.items():
            shared = b.shared - remove
            level = self.types[b.type].share_idle_cpus_in_same
            if level is not None and add and b.cpus:
                shared = shared | (add & level_cpus(self.topology, b.cpus, level))
            out[name] = b if shared == b.shared else replace(b, shared=shared)
        return BalloonsState(balloons=out, members=state.members)

    def _commit(self, state: BalloonsState, balloon: Balloon) -> BalloonsState:
        """`state` with `balloon` made or resized, its CPUs shared as nri-plugins shares
        them (`share_idle`): after an inflation every balloon shares the idle CPUs of
        its domains, the new CPUs are shared by none; after a deflation the CPUs given
        back are shared by the balloons (this one too) in whose domains they are."""
        old = state.balloons.get(balloon.name)
        before = old.cpus if old is not None else _NO_CPUS
        balloon = replace(balloon, shared=old.shared if old is not None else _NO_CPUS)
        state = state.with_balloon(balloon)
        added, removed = balloon.cpus - before, before - balloon.cpus
        if added:
            return self.share_idle(state, add=self.config.available - state.used, remove=added)
        if removed:
            return self.share_idle(state, add=removed)
        return state

    def _pick(self, state: BalloonsState, t: BalloonType, cpus: CPUSet, count: int) -> CPUSet:
        """`count` of `cpus` for a balloon of type `t` that has none yet (rebuild)."""
        got = grow(
            self.topology,
            self.tree,
            current=IDSet(),
            free=cpus,
            delta=count,
            opts=self.tree_options[t.name],
            loaded=self._loaded(state),
        )
        assert got is not None  # count <= len(cpus)
        return got

    def _resize(
        self, state: BalloonsState, balloon: Balloon, milli: int, *, occupied: bool
    ) -> Balloon | str:
        """`balloon` sized for `milli` millicores (`needed_cpus`), or why it cannot be."""
        return self._resized(
            balloon,
            milli,
            used=state.used - balloon.cpus,
            loaded=self._loaded(state),
            occupied=occupied,
        )

    def _resized(
        self,
        b: Balloon,
        milli: int,
        *,
        used: CPUSet,
        loaded: Mapping[TopologyLevel, CPUSet],
        occupied: bool,
    ) -> Balloon | str:
        """`b` (a balloon or a component) sized for `milli`, taking no CPU of `used`.

        A composite's components are sized one after the other for their share, each
        taking CPUs by its own type's preferences and seeing the others' as used; its
        CPUs are their union.  Any ``maxCPUs`` on the way that the size passes fails.
        """
        t = self.types[b.type]
        want = self.needed_cpus(b, milli, occupied=occupied)
        if t.max_cpus and want > t.max_cpus:
            return f"{b.name} would need {want} CPUs; maxCPUs is {t.max_cpus}"
        if not b.components:
            cpus = self._sized(b.cpus, t, want, used=used, loaded=loaded)
            if isinstance(cpus, str):
                return f"{b.name} {cpus}"
            return replace(b, cpus=cpus)
        share = self.component_share(b, milli)
        done: list[Balloon] = []
        for i, comp in enumerate(b.components):
            others = union(x.cpus for x in (*done, *b.components[i + 1 :]))
            got = self._resized(comp, share, used=used | others, loaded=loaded, occupied=occupied)
            if isinstance(got, str):
                return f"{b.name} component {got}"
            done.append(got)
        return replace(b, cpus=union(x.cpus for x in done), components=tuple(done))

    def _loaded(self, state: BalloonsState) -> dict[TopologyLevel, CPUSet]:
        """Level -> the CPUs of every balloon whose type ``loads`` a class of that level
        (`allocation.grow` keeps off their domains there)."""
        out: dict[TopologyLevel, CPUSet] = {}
        for top in state.balloons.values():
            for b in top.walk():  # a composite's components load as their types do
                for level in self.tree_options[b.type].loads:
                    out[level] = out.get(level, IDSet()) | b.cpus
        return out

    def _sized(
        self,
        cpus: CPUSet,
        t: BalloonType,
        want: int,
        *,
        used: CPUSet,
        loaded: Mapping[TopologyLevel, CPUSet],
    ) -> CPUSet | str:
        """`cpus` shrunk or grown to `want` CPUs by the preferences of type `t`, taking
        only CPUs not in `used` (`cpus` may be in it or not), keeping off the domains of
        `loaded` (`_loaded`) at the levels `t` loads."""
        have = len(cpus)
        if want == have:
            return cpus
        # the balloon may not be in the state yet (a new one, a claim at rebuild)
        free = self.config.available - used - cpus
        opts = self.tree_options[t.name]
        if want < have:
            gone = shrink(
                self.topology, self.tree, current=cpus, free=free, count=have - want, opts=opts
            )
            return cpus - gone
        more = grow(
            self.topology,
            self.tree,
            current=cpus,
            free=free,
            delta=want - have,
            opts=opts,
            loaded=loaded,
        )
        if more is None:
            return f"would need {want - have} more CPUs; {len(free)} are free"
        return cpus | more

    def _new_balloon(
        self, state: BalloonsState, t: BalloonType, milli: int | None, *, seed: CPUSet = _NO_CPUS
    ) -> Balloon | str:
        """A new instance of `t` sized for `milli` (None: empty), or why it cannot be made;
        it keeps what it can of the free CPUs of `seed` (rebuild: where its container
        runs now)."""
        fresh = self._unsized(state, t)
        if isinstance(fresh, str):
            return fresh
        occupied = milli is not None
        own = seed & (self.config.available - state.used)
        if own:
            fresh = self._fill(state, fresh, own, milli or 0, occupied=occupied)
        return self._resize(state, fresh, milli or 0, occupied=occupied)

    def _unsized(
        self, state: BalloonsState, t: BalloonType, near: CPUSet | None = None
    ) -> Balloon | str:
        """A new instance of `t` without CPUs, a composite with new components of the
        types `_component_types` chooses; or why it cannot be made (``maxBalloons``
        counts the state's instances of a type, not components, as nri-plugins does)."""
        mine = state.of_type(t.name)
        if t.max_balloons and len(mine) >= t.max_balloons:
            return f"no new {t.name} balloon: maxBalloons {t.max_balloons} reached"
        taken = {b.instance for b in mine}
        instance = next(i for i in range(len(mine) + 1) if i not in taken)
        components: list[Balloon] = []
        for ctype in self._component_types(state, t, near):
            got = self._unsized(state, ctype, near)
            if isinstance(got, str):
                return f"no new {t.name} balloon: its component {got}"
            components.append(got)
        return Balloon(type=t.name, instance=instance, cpus=IDSet(), components=tuple(components))

    def _component_types(
        self, state: BalloonsState, t: BalloonType, near: CPUSet | None
    ) -> list[BalloonType]:
        """The types of the components a new `t` balloon gets: every one in
        ``components``, or with ``componentCreation: balance-balloons`` the one with the
        fewest instances (top-level or components) of itself and the types it is made
        of, the first such in ``components``.  `near` (rebuild: the CPUs the balloon
        claims) puts first the component whose preferred CPUs overlap it most."""
        types = [self.types[c.balloon_type] for c in t.components]
        if t.component_creation != ComponentCreation.BALANCE_BALLOONS:
            return types
        made = Counter(x.type for b in state.balloons.values() for x in b.walk())

        def key(i: int) -> tuple[int, int, int]:
            ctype = types[i]
            close = len(near & self._preferred(ctype)) if near else 0
            return (-close, sum(made[name] for name in self._made_of(ctype)), i)

        return [types[min(range(len(types)), key=key)]]

    def _made_of(self, t: BalloonType) -> set[str]:
        """The names of `t` and of every type its components are made of, recursively."""
        out = {t.name}
        for comp in t.components:
            out |= self._made_of(self.types[comp.balloon_type])
        return out

    def _preferred(self, t: BalloonType) -> CPUSet:
        """The CPUs a new `t` balloon wants first (its first close hint), or for a
        composite those of all its component types."""
        if t.components:
            return union(self._preferred(self.types[c.balloon_type]) for c in t.components)
        close = [h.cpus for h in self.tree_options[t.name].hints if not h.far]
        return close[0] if close else self.config.available

    def _fill(
        self,
        state: BalloonsState,
        b: Balloon,
        pool: CPUSet,
        milli: int,
        *,
        occupied: bool,
        first: CPUSet | None = None,
    ) -> Balloon:
        """`b` holding CPUs of `pool` only, as many as it needs for `milli` or all of
        `pool` when fewer, picked as its type grows (`_pick`), from those of `first`
        alone when they are enough; a composite's are its components', each picked so
        (rebuild: spreading claimed or seeded CPUs over the components)."""
        if not b.components:
            t = self.types[b.type]
            n = min(self.target_cpus(t, milli, occupied=occupied), len(pool))
            inner = pool & first if first else IDSet()
            return replace(b, cpus=self._pick(state, t, inner if len(inner) >= n else pool, n))
        share = self.component_share(b, milli)
        done: list[Balloon] = []
        for comp in b.components:
            left = pool - union(x.cpus for x in done)
            done.append(self._fill(state, comp, left, share, occupied=occupied, first=first))
        return replace(b, cpus=union(x.cpus for x in done), components=tuple(done))

    def initial_state(self) -> BalloonsState:
        st = self._initial()
        if isinstance(st, str):
            raise AllocationError(st)
        return st

    def _creation_rank(self, t: BalloonType) -> int:
        """Where `t`'s ``minBalloons`` balloons come in the initial state: by
        ``allocatorPriority``, high first and none (the option absent) last, as
        nri-plugins' setConfig creates them, so a high-priority type takes its CPUs
        before the reserved balloon (low, or normal when ``reservedResources`` is a
        cpuset); in type order within a priority."""
        prio = t.allocator_priority
        if t.name == RESERVED and self.config.reserved:
            prio = CPUPriority.NORMAL
        return list(CPUPriority).index(prio)

    def _initial(self) -> BalloonsState | str:
        """The ``minBalloons`` balloons of every type, in `_creation_rank` order; or why
        not."""
        st = BalloonsState(balloons={}, members={})
        for t in sorted(self.config.types, key=self._creation_rank):
            for _ in range(t.min_balloons):
                got = self._new_balloon(st, t, None)
                if isinstance(got, str):
                    return f"policy balloons: minBalloons of {t.name}: {got}"
                st = st.with_balloon(got)
        return self.share_idle(st, add=self.config.available - st.used)

    # ---- views and rendering -------------------------------------------------------

    def _mems(self, t: BalloonType, cpus: CPUSet, kinds: Sequence[MemoryKind]) -> NodeSet:
        pin = t.pin_memory if t.pin_memory is not None else self.config.options.pin_memory
        if not pin or not cpus:
            return IDSet()
        wanted = tuple(kinds) or self.config.memory_kinds.get(t.name) or _DRAM
        return union(
            self.topology.memory_nodes_near(n, wanted) for n in self.topology.nodes_of(cpus)
        ) or self.topology.nodes_of(cpus)

    def views(self, state: BalloonsState) -> dict[str, BalloonView]:
        """Every balloon's view: own CPUs plus shared idle ones, and memory nodes."""
        reserved = next((b.cpus for b in state.balloons.values() if b.type == RESERVED), None)
        out = {}
        for name, b in state.balloons.items():
            t = self.types[b.type]
            cpus = b.cpus | b.shared
            if not cpus:
                cpus = reserved or self.reserved_home
            out[name] = BalloonView(cpus=cpus, mems=self._mems(t, cpus, ()))
        return out

    def shared_idle(self, state: BalloonsState, name: str) -> CPUSet:
        """The idle CPUs balloon `name`'s containers share (`share_idle`)."""
        return state.balloons[name].shared

    @staticmethod
    def _hides(t: BalloonType, m: Member) -> bool:
        """Whether `m` sees one thread per core: its annotation, else its type's."""
        if m.hide_hyperthreads is None:
            return bool(t.hide_hyperthreads)
        return m.hide_hyperthreads

    def _render(self, m: Member, view: BalloonView, t: BalloonType) -> Assignment:
        cpus = view.cpus
        if self._hides(t, m):
            cpus = one_thread_per_core(self.topology, cpus)
        if not self.config.options.pin_cpu:
            cpus = IDSet()
        if m.memory is not None:
            mems = m.memory.given
        else:
            mems = self._mems(t, view.cpus, m.memory_kinds) if m.memory_kinds else view.mems
        if m.preserve_mems:
            mems = IDSet()
        return Assignment(
            container_id=m.container_id,
            cpus=cpus,
            mems=mems,
            kind=CPUKind.RESERVED if t.name == RESERVED else CPUKind.SHARED,
            pool=m.balloon,
        )

    def render(self, state: BalloonsState) -> dict[ContainerID, Assignment]:
        """Every container's assignment in `state`."""
        views = self.views(state)
        return {
            cid: self._render(m, views[m.balloon], self.types[state.balloons[m.balloon].type])
            for cid, m in state.members.items()
        }

    def _render_changed(
        self, old: BalloonsState, new: BalloonsState, cid: ContainerID
    ) -> tuple[dict[ContainerID, Assignment], dict[ContainerID, Assignment]]:
        v_old, v_new = self.views(old), self.views(new)
        changed = {n for n in v_new if v_old.get(n) != v_new[n]} | {
            n for n in v_old if n not in v_new
        }

        def pick(
            st: BalloonsState, views: Mapping[str, BalloonView]
        ) -> dict[ContainerID, Assignment]:
            out = {}
            for c, m in st.members.items():
                if c == cid or m.balloon in changed:
                    t = self.types[st.balloons[m.balloon].type]
                    out[c] = self._render(m, views[m.balloon], t)
            return out

        return pick(old, v_old), pick(new, v_new)

    # ---- choosing a balloon ----------------------------------------------------------

    @staticmethod
    def _plain_member(c: ContainerInfo) -> Member:
        """`c` as a member before its annotations and its type's ``groupBy`` are read."""
        return Member(
            container_id=c.id,
            pod_id=c.pod.id,
            namespace=c.namespace,
            pretty=c.pretty,
            balloon="",
            milli=c.request.cpu_request_milli,
        )

    def _member(self, c: ContainerInfo, t: BalloonType) -> Member:
        kinds = parse_memory_types(c)
        return replace(
            self._plain_member(c),
            group=expand(t.group_by, c) if t.group_by else "",
            hide_hyperthreads=parse_bool_annotation(c, HIDE_HYPERTHREADS),
            memory_kinds=tuple(sorted(kinds)) if kinds else (),
            preserve_mems=bool(parse_bool_annotation(c, MEMORY_PRESERVE)),
        )

    def preserved(self, c: ContainerInfo) -> str | None:
        """Why the policy leaves `c` alone (``cpu.preserve`` annotation, the ``preserve``
        expressions), or None: such a container is in no balloon, its cpuset untouched."""
        if parse_bool_annotation(c, CPU_PRESERVE):
            return f"preserved: annotation {CPU_PRESERVE}"
        match = self.config.options.preserve
        for expr in match.match_expressions if match is not None else ():
            if evaluate(expr, c):
                return f"preserved: matches {expr.key} {expr.operator} {list(expr.values)}"
        return None

    def _leave_alone(
        self, state: BalloonsState, c: ContainerInfo, reason: str
    ) -> Decision[BalloonsState]:
        new = self._follow_mems(state, self._drop(state, c.id)) if c.id in state.members else state
        untouched = Assignment(
            container_id=c.id, cpus=IDSet(), mems=IDSet(), kind=CPUKind.NONE, pool=""
        )
        before, after = self._render_changed(state, new, c.id)
        after[c.id] = untouched
        return Decision(
            state=new,
            assignment=untouched,
            updates=diff_updates(before, after, skip={c.id}),
            reason=reason,
        )

    def _fill_chain(self, t: BalloonType) -> list[str]:
        chain = []
        if t.group_by:
            chain.append("same-group")
        if not t.prefer_spreading_pods:
            chain.append("same-pod")
        if t.prefer_per_namespace_balloon:
            chain += ["same-namespace", "new"]
        if t.prefer_new_balloons:
            chain += ["new", "balanced", "balanced-inflate"]
        else:
            chain += ["balanced", "balanced-inflate", "new"]
        return chain

    def _place(
        self,
        state: BalloonsState,
        t: BalloonType,
        m: Member,
        *,
        prefer: str | None = None,
        seed: CPUSet = _NO_CPUS,
    ) -> tuple[Balloon, str]:
        """The balloon (resized, or new: seeded with `seed`) `m` goes to in `state`, and
        the fill step.

        A step's candidates are the balloons it names that can grow to take `m`; the one
        with the most free millicores wins (free now; for balanced-inflate, free when
        inflated as far as it can), then the one with fewest containers, then the one
        made first (the state's order, nri-plugins' list of balloons: a balloon made
        again after one went comes last, whatever its instance).  The new step takes an
        empty balloon of the type before making one.
        """
        mine = state.of_type(t.name)
        members = {b.name: state.members_of(b.name) for b in mine}
        if t.group_by:
            mine = [b for b in mine if all(x.group == m.group for x in members[b.name])]
        free_cpus = len(self.config.available - state.used)

        def free(b: Balloon, *, inflated: bool) -> int:
            cpus = len(b.cpus)
            if inflated:
                cpus += free_cpus
                if t.max_cpus:
                    cpus = min(cpus, max(t.max_cpus, len(b.cpus)))
            return 1000 * cpus - state.milli_of(b.name)

        reasons: list[str] = []
        steps = ["current"] if prefer is not None else []
        steps += self._fill_chain(t)
        for step in steps:
            if step == "new":
                for b in (b for b in mine if not members[b.name]):
                    got = self._resize(state, b, m.milli, occupied=True)
                    if isinstance(got, Balloon):
                        return got, step
                    reasons.append(got)
                made = self._new_balloon(state, t, m.milli if seed else None, seed=seed)
                if isinstance(made, Balloon) and not seed:
                    # made at its minCPUs, then inflated for `m` as a balloon already
                    # there, as nri-plugins does (the second pick grows near the first)
                    made = self._resize(state.with_balloon(made), made, m.milli, occupied=True)
                if isinstance(made, Balloon):
                    return made, step
                reasons.append(made)
                continue
            if step == "current":
                cands = [b for b in mine if b.name == prefer]
            elif step == "same-group":
                cands = [b for b in mine if any(x.group == m.group for x in members[b.name])]
            elif step == "same-pod":
                cands = [b for b in mine if any(x.pod_id == m.pod_id for x in members[b.name])]
            elif step == "same-namespace":
                cands = [
                    b for b in mine if any(x.namespace == m.namespace for x in members[b.name])
                ]
            elif step == "balanced":
                cands = [b for b in mine if free(b, inflated=False) >= m.milli]
            else:
                cands = list(mine)
            inflated = step == "balanced-inflate"
            fits: list[tuple[tuple[int, int, int], Balloon]] = []
            for b in cands:
                got = self._resize(state, b, state.milli_of(b.name) + m.milli, occupied=True)
                if isinstance(got, str):
                    reasons.append(got)
                    continue
                rank = (-free(b, inflated=inflated), len(members[b.name]), mine.index(b))
                fits.append((rank, got))
            if fits:
                return min(fits, key=lambda kb: kb[0])[1], step
        raise AllocationError(
            f"no {t.name} balloon can take {m.milli}m CPU: " + "; ".join(dict.fromkeys(reasons))
        )

    def _add(
        self,
        state: BalloonsState,
        c: ContainerInfo,
        *,
        prefer: str | None = None,
        seed: CPUSet = _NO_CPUS,
        as_member: tuple[BalloonType, Member] | None = None,
    ) -> tuple[BalloonsState, str]:
        """`state` with `c` placed, as its annotations say or (rebuild) as `as_member`."""
        if as_member is None:
            t = balloon_type_of(c, self.config)
            m = self._member(c, t)
        else:
            t, m = as_member
        try:
            balloon, step = self._place(state, t, m, prefer=prefer, seed=seed)
        except AllocationError as exc:
            raise AllocationError(f"{c.pretty}: {exc}") from exc
        new = self._commit(state, balloon)
        m = replace(m, balloon=balloon.name)
        new = new.with_member(replace(m, memory=self._first_zone(new, m)))
        return new, f"in balloon {balloon.name} ({step})"

    def _first_zone(self, state: BalloonsState, m: Member) -> MemZone | None:
        """`m`'s memory zone as it joins its balloon in `state`: the nodes near the
        balloon's view of the kinds it wants (None when memory is not pinned)."""
        b = state.balloons[m.balloon]
        t = self.types[b.type]
        view = self.views(state)[m.balloon]
        zone = self._mems(t, view.cpus, m.memory_kinds) if m.memory_kinds else view.mems
        if not zone:
            return None
        return MemZone.first(self.topology.nodes_of(view.cpus), zone)

    def _follow_mems(self, old: BalloonsState, new: BalloonsState) -> BalloonsState:
        """`new` with the memory zones of the containers whose balloon changed its view
        since `old` reallocated (`memzone.realloc`: a zone only widens); a container
        that joined its balloon in between keeps the zone it joined with."""
        v_old, v_new = self.views(old), self.views(new)
        members = dict(new.members)
        for cid, m in new.members.items():
            was = old.members.get(cid)
            if m.memory is None or was is None or was.balloon != m.balloon:
                continue
            if v_old.get(m.balloon) == v_new[m.balloon]:
                continue
            t = self.types[new.balloons[m.balloon].type]
            kinds = m.memory_kinds or self.config.memory_kinds.get(t.name) or ()
            nodes = self.topology.nodes_of(v_new[m.balloon].cpus)
            members[cid] = replace(m, memory=realloc(self.topology, m.memory, nodes, kinds))
        return BalloonsState(balloons=new.balloons, members=members)

    def _drop(self, state: BalloonsState, cid: ContainerID) -> BalloonsState:
        """`state` without `cid`: its balloon deflates, or goes when empty and optional."""
        m = state.members[cid]
        return self._settle(state.without_member(cid), m.balloon)

    def _settle(self, state: BalloonsState, name: str) -> BalloonsState:
        """`state` with balloon `name` sized for its members, or gone when empty and
        beyond its type's ``minBalloons``."""
        b = state.balloons.get(name)
        if b is None:
            return state
        t = self.types[b.type]
        got = self._resize(state, b, state.milli_of(name), occupied=bool(state.members_of(name)))
        assert isinstance(got, Balloon)  # deflating within maxCPUs always fits
        state = self._commit(state, got)
        if not state.members_of(name) and len(state.of_type(t.name)) > t.min_balloons:
            # deflated to its minCPUs first, as nri-plugins does: the CPUs it gave back
            # are shared at once, the rest only when a balloon next inflates
            return state.without_balloon(name)
        return state

    # ---- the protocol --------------------------------------------------------------

    def allocate(self, state: BalloonsState, container: ContainerInfo) -> Decision[BalloonsState]:
        if container.id in state.members:
            return self.update(state, container)
        why = self.preserved(container)
        if why is not None:
            return self._leave_alone(state, container, why)
        new, reason = self._add(state, container)
        new = self._follow_mems(state, new)
        t = self.types[new.balloons[new.members[container.id].balloon].type]
        scheduling = self.scheduling.resolve(container, default=t.scheduling_class or None)
        decision = decide(self._render_changed, state, new, container.id, reason)
        return with_scheduling(decision, scheduling)

    def release(self, state: BalloonsState, container_id: ContainerID) -> Decision[BalloonsState]:
        if container_id not in state.members:
            return nothing_to_release(state)
        new = self._follow_mems(state, self._drop(state, container_id))
        return decide_release(self._render_changed, state, new, container_id)

    def update(self, state: BalloonsState, container: ContainerInfo) -> Decision[BalloonsState]:
        old = state.members.get(container.id)
        if old is None:
            return self.allocate(state, container)
        why = self.preserved(container)
        if why is not None:
            return self._leave_alone(state, container, why)
        t = balloon_type_of(container, self.config)
        fresh = replace(self._member(container, t), balloon=old.balloon, memory=old.memory)
        if state.balloons[old.balloon].type == t.name and fresh == old:
            return decide(self._render_changed, state, state, container.id, "unchanged")
        # the old balloon keeps its CPUs until the container is placed again, so that
        # it can stay there, resized; only then is the old balloon settled
        without = state.without_member(container.id)
        new, reason = self._add(without, container, prefer=old.balloon)
        if new.members[container.id].balloon != old.balloon:
            new = self._settle(new, old.balloon)
        else:  # it keeps its memory zone, which follows the balloon as the others' do
            new = new.with_member(replace(new.members[container.id], memory=old.memory))
        new = self._follow_mems(state, new)
        return decide(self._render_changed, state, new, container.id, f"updated: {reason}")

    def rebuild(self, containers: Sequence[ContainerInfo]) -> Decision[BalloonsState]:
        st = BalloonsState(balloons={}, members={})
        notes: list[str] = []
        # preserved ones stay where they are, unknown
        unique = {c.id: c for c in each_once(c for c in containers if self.preserved(c) is None)}
        replayed = self._replayed(list(unique.values()))
        if replayed is not None:
            return Decision(state=replayed, updates=(), reason="rebuilt: as created")
        known = {c.id: self._rebuild_member(c, notes) for c in unique.values()}
        types = {cid: t for cid, (t, _) in known.items()}
        # 0. the reserved balloon where it is from the start (`initial_state`): no other
        # balloon claims its CPUs; its containers' claim takes it over
        reserved = self._new_balloon(st, self.types[RESERVED], None)
        assert isinstance(reserved, Balloon)  # initial_state makes it so
        st = st.with_balloon(reserved)
        # 1. containers on the same CPUs, of the same type: one balloon claiming them
        groups: dict[tuple[str, CPUSet], list[ContainerInfo]] = {}
        for c in unique.values():
            if c.current_cpus:
                groups.setdefault((types[c.id].name, c.current_cpus), []).append(c)
        holders = holders_per_cpu(cpus for _, cpus in groups)
        held = self._held(groups, known)
        placed: set[ContainerID] = set()
        for (tname, cpus), members in sorted(
            groups.items(), key=lambda kv: (len(kv[0][1]), kv[0][0], kv[0][1].sorted())
        ):
            t = self.types[tname]
            ms = [known[c.id][1] for c in members]
            got = self._claim(st, t, cpus, ms, holders, held)
            if got is None:
                continue
            st = st.with_balloon(got)
            for m in ms:
                st = st.with_member(replace(m, balloon=got.name))
                placed.add(m.container_id)
        # 2. the balloons every type has from the start, then everyone else as if new
        reported = union(c.current_cpus for c in unique.values() if c.current_cpus)
        st = self._top_up(st, unseen=self.config.available - reported)
        for c in unique.values():
            if c.id in placed:
                continue
            try:
                st, _ = self._add(st, c, seed=c.current_cpus or IDSet(), as_member=known[c.id])
            except (AllocationError, AnnotationError) as exc:
                notes.append(f"not placed: {exc}")
        st = self._reshared(st, unique)
        st = self._rezoned(st, unique)
        rendered = self.render(st)
        updates = moved(unique.values(), rendered)
        reason = "rebuilt" + ("; " + "; ".join(notes) if notes else "")
        return Decision(state=st, updates=updates, reason=reason)

    def _replayed(self, containers: Sequence[ContainerInfo]) -> BalloonsState | None:
        """The initial state with `containers` allocated in the order given, when that
        puts every one of them exactly where it reports it runs (CPUs and memory
        nodes), else None.  nri-plugins restarts so, and where that moves nobody the
        balloons then own the CPUs theirs own, not only show the same ones."""
        st = self._initial()
        if isinstance(st, str):
            return None
        for c in containers:
            if c.current_cpus is None:
                return None
            try:
                st = self.allocate(st, c).state
            except (AllocationError, AnnotationError):
                return None
        rendered = self.render(st)
        for c in containers:
            got = rendered[c.id]
            if got.cpus != c.current_cpus or got.mems != (c.current_mems or IDSet()):
                return None
        return st

    def _reshared(
        self, state: BalloonsState, containers: Mapping[ContainerID, ContainerInfo]
    ) -> BalloonsState:
        """`state` with the idle CPUs each balloon shares (rebuild): those of its
        domains, as when nri-plugins starts; when every container reports its CPUs,
        for a balloon that kept the CPUs its containers report, only those of them they
        report (nri-plugins shares a deleted balloon's last CPUs only at the next
        inflation: `share_idle`)."""
        st = BalloonsState(
            balloons={n: replace(b, shared=_NO_CPUS) for n, b in state.balloons.items()},
            members=state.members,
        )
        st = self.share_idle(st, add=self.config.available - st.used)
        if any(not c.current_cpus for c in containers.values()):
            return st
        balloons = dict(st.balloons)
        for name, b in st.balloons.items():
            t = self.types[b.type]
            seen = []
            for m in st.members_of(name):
                cpus = containers[m.container_id].current_cpus or _NO_CPUS
                if self._hides(t, m):  # it sees one thread of each core it shares
                    cpus = cpus | IDSet(s for c in cpus for s in self.topology.siblings(c))
                seen.append(cpus)
            reported = union(seen)
            if b.shared and reported and b.cpus <= reported:
                balloons[name] = replace(b, shared=b.shared & reported)
        return BalloonsState(balloons=balloons, members=st.members)

    def _rezoned(
        self, state: BalloonsState, containers: Mapping[ContainerID, ContainerInfo]
    ) -> BalloonsState:
        """`state` with every member's memory zone as it joins its balloon now
        (rebuild), or the memory nodes it reports when they hold that zone: a zone
        widened before the restart stays as wide."""
        members = {}
        for cid, m in state.members.items():
            mz = self._first_zone(state, m)
            now = containers[cid].current_mems
            if mz is not None and now and mz.zone <= now:
                mz = MemZone(affinity=mz.affinity, zone=now, given=now)
            members[cid] = replace(m, memory=mz)
        return BalloonsState(balloons=state.balloons, members=members)

    def _rebuild_member(self, c: ContainerInfo, notes: list[str]) -> tuple[BalloonType, Member]:
        """`c`'s balloon type and membership at rebuild, the same for claiming its CPUs
        and for placing it as new: when its annotations cannot be read (an unknown
        balloon type, a bad value) it goes to the default type as a plain member, where
        it went the first time, so a second rebuild does not move it."""
        try:
            t = balloon_type_of(c, self.config)
            return t, self._member(c, t)
        except AnnotationError as exc:
            notes.append(f"unreadable, in the default balloon: {exc}")
        fallback = self.config.type_named(DEFAULT)
        assert fallback is not None  # resolve_config always adds it
        return fallback, self._plain_member(c)

    def _claim(
        self,
        state: BalloonsState,
        t: BalloonType,
        cpus: CPUSet,
        members: Sequence[Member],
        holders: Mapping[int, int],
        held: CPUSet,
    ) -> Balloon | None:
        """A balloon of `t` for `members`, now running on `cpus`, keeping them there:
        their CPUs first, then hidden siblings of theirs that are `held` (`_held`)."""
        milli = sum(m.milli for m in members)
        if t.group_by and len({m.group for m in members}) > 1:
            return None
        empty = [b for b in state.of_type(t.name) if not state.members_of(b.name)]
        base = min(empty, key=lambda b: b.instance) if empty else None
        if base is not None:
            # the reserved balloon, made first: taken over, it keeps its CPUs first
            state = state.without_balloon(base.name)
        fresh = self._unsized(state, t, cpus)
        if isinstance(fresh, str):
            return None
        want = self.needed_cpus(fresh, milli, occupied=True)
        if t.max_cpus and want > t.max_cpus:
            return None
        mine = cpus
        if any(self._hides(t, m) for m in members):
            # the container sees the lowest thread of each core the balloon has: the
            # balloon may hold the higher threads of those cores too
            mine = cpus | IDSet(s for c in cpus for s in self.topology.siblings(c) if s > c)
        own = mine & (self.config.available - state.used)
        # reported by no other group (a hidden sibling is not in `cpus`: any report of it
        # is another's)
        alone = IDSet(c for c in own if holders.get(c, 0) <= (1 if c in cpus else 0))
        prefer = [cpus & alone, alone & held, alone, cpus]
        level = t.share_idle_cpus_in_same
        if level is not None:
            # `cpus` may include idle CPUs shared in the balloon's domains (a composite's
            # components, or a large balloon, may span several).  Where others report
            # CPUs of a domain too, those they share are the idle ones and the rest
            # were the balloon's own; elsewhere keeping a CPU in each domain keeps the
            # balloon's view
            units = {level_cpus(self.topology, IDSet([c]), level) for c in own}
            seen = [u for u in units if any(holders.get(c, 0) > 1 for c in u & cpus)]
            firsts = IDSet(min(u & alone or u & own) for u in units)
            prefer[:0] = [union(u & alone for u in seen), firsts]
        # None when `own` is too few to hold their balloon as it is: not a placement of
        # this configuration (a live reconfiguration changed the type's sizes), so they
        # go by the fill chain, as nri-plugins refills, not into a balloon inflated
        # around them
        if base is not None:
            own, prefer = own | base.cpus, [base.cpus, *prefer]
        keep = take_cpus(self.topology, own, want, prefer=prefer)
        if keep is None:
            return None
        return self._fill(state, fresh, keep, milli, occupied=True)

    def _held(
        self,
        groups: Mapping[tuple[str, CPUSet], Sequence[ContainerInfo]],
        known: Mapping[ContainerID, tuple[BalloonType, Member]],
    ) -> CPUSet:
        """The CPUs the reports show to be in some balloon though no one reports them
        (rebuild): those in the ``shareIdleCPUsInSame`` domains of a group that sees
        every thread, yet not in its cpuset, were not idle.  A claim prefers them for
        the hidden hyperthreads of a ``hideHyperthreads`` balloon."""
        out: list[CPUSet] = []
        for (tname, cpus), members in groups.items():
            level = self.types[tname].share_idle_cpus_in_same
            if level is None or any(self._hides(*known[c.id]) for c in members):
                continue
            out.append(level_cpus(self.topology, cpus, level) - cpus)
        return union(out) & self.config.available

    def _top_up(self, state: BalloonsState, *, unseen: CPUSet) -> BalloonsState:
        """`state` with at least ``minBalloons`` balloons of every type (rebuild).

        The empty ones are made in the initial state's order (`_creation_rank`) and
        take the CPUs they have there (`initial_homes`) when those are unseen (in no
        container's reported cpuset) and free, so a rebuild without containers is the
        initial state; else they take their CPUs from `unseen` where they can: that is
        where empty balloons were, so the idle CPUs other balloons share stay the same.
        (The reserved balloon is made before the claims, at its home.)
        """
        # unseen CPUs in the domains whose idle CPUs a claimed balloon shares are not
        # idle (it would report them): empty balloons held them
        held = unseen & union(
            level_cpus(self.topology, b.cpus, level)
            for b in state.balloons.values()
            if (level := self.types[b.type].share_idle_cpus_in_same) is not None
        )
        for t in sorted(self.config.types, key=self._creation_rank):
            while len(state.of_type(t.name)) < t.min_balloons:
                got = self._new_balloon(state, t, None)
                if isinstance(got, str):
                    break
                free = unseen - state.used
                home = self.initial_homes.get(got.name, _NO_CPUS)
                if home and home <= free and len(home) == len(got.cpus):
                    got = self._fill(state, got, home, 0, occupied=False)
                elif len(free) >= len(got.cpus):
                    got = self._fill(state, got, free, 0, occupied=False, first=held)
                state = state.with_balloon(got)
        # the initial state's balloons first, in its order (nri-plugins' list of balloons
        # after a restart), then the others
        order = {name: i for i, name in enumerate(self.initial_homes)}
        ranked = sorted(state.balloons.items(), key=lambda nb: order.get(nb[0], len(order)))
        return BalloonsState(balloons=dict(ranked), members=state.members)

    # ---- what the shell and reports read --------------------------------------------

    def _class_name(self, name: str) -> str:
        """`name`, or for an empty one the class named ``default`` when cpuClasses has it."""
        if name or not any(c.name == DEFAULT_CPU_CLASS for c in self.config.options.cpu_classes):
            return name
        return DEFAULT_CPU_CLASS

    def cpu_classes(self, state: BalloonsState) -> dict[str, CPUSet]:
        """CPU class name -> the CPUs in it: balloons' ``cpuClass`` (a composite's
        components carry theirs), idle ``idleCPUClass``.

        An empty name is the class ``default`` when ``cpuClasses`` defines one.
        """
        out: dict[str, CPUSet] = {}
        for top in state.balloons.values():
            for b in top.walk():
                cls = self._class_name(self.types[b.type].cpu_class)
                if cls and b.cpus:
                    out[cls] = out.get(cls, IDSet()) | b.cpus
        idle_class = self._class_name(self.config.options.idle_cpu_class)
        idle = self.config.available - state.used
        if idle_class and idle:
            out[idle_class] = out.get(idle_class, IDSet()) | idle
        return out

    def irq_use(self, state: BalloonsState) -> IrqUse:
        """The balloons' interrupt wishes (``irqClaim``, ``irqMode``) for an interrupt
        controller (`irq_affinity.plan_affinities`; `nri_resmgr.control.irq` writes them)."""
        wishing = {t.name for t in self.config.types if t.irq_claim or t.irq_mode}
        return IrqUse(
            allowed=self.config.available,
            controllable=self.config.options.controllable_interrupts,
            balloons=tuple(
                IrqBalloon(
                    name=name,
                    cpus=b.cpus,
                    claims=self.types[b.type].irq_claim,
                    mode=IrqMode(self.types[b.type].irq_mode),
                )
                for name, b in sorted(state.balloons.items())
                if b.type in wishing and b.cpus
            ),
            configured=bool(wishing),
            claims=tuple(
                (f"balloonTypes[{t.name}].irqClaim", t.irq_claim)
                for t in self.config.types
                if t.irq_claim
            ),
        )

    def cpu_class_use(self, state: BalloonsState) -> CPUClassUse:
        """What the CPU class control sets after a decision (`cpu_classes` of `state`,
        the definitions, the available CPUs as the ones it may touch)."""
        opts = self.config.options
        return CPUClassUse(
            cpus=self.cpu_classes(state),
            managed=self.config.available,
            classes=opts.cpu_classes,
            turbo_domain=opts.turbo_domain,
        )

    def balloons(self, state: BalloonsState) -> tuple[BalloonReport, ...]:
        """Every balloon with its CPUs, memory and containers: the report hook the
        simulator, the NodeResourceTopology report and the metrics read
        (`nri_resmgr.ops.metrics.balloon_snapshots`)."""
        views = self.views(state)
        show_all = self.config.options.show_containers_in_nrt
        order = {t.name: i for i, t in enumerate(self.config.types)}
        out = []
        for name, b in sorted(
            state.balloons.items(), key=lambda nb: (order[nb[1].type], nb[1].instance)
        ):
            t = self.types[b.type]
            show = t.show_containers_in_nrt if t.show_containers_in_nrt is not None else show_all
            out.append(
                BalloonReport(
                    name=name,
                    type=b.type,
                    cpus=b.cpus,
                    shared_idle_cpus=self.shared_idle(state, name),
                    mems=views[name].mems,
                    containers=tuple(sorted(str(m.container_id) for m in state.members_of(name))),
                    show_containers_in_nrt=show,
                    component_cpus=_component_cpus(b),
                    excess_milli=1000 * len(b.cpus) - state.milli_of(name),
                )
            )
        return tuple(out)

    def pool_cpus(self, state: BalloonsState, assignments: Iterable[Assignment]) -> PoolCPUs:
        """Every balloon (`balloons`): its CPUs are what the picture marks, not pools."""
        return PoolCPUs(balloons=balloon_cpus(self.balloons(state)))

    def check(self, state: BalloonsState) -> None:
        """`invariants.check_invariants` of `state`."""
        check_invariants(self, state)
