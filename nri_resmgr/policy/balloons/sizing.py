"""Balloon sizes and the CPUs they take: what every balloons decision builds on.

Theory of operation: `Sizing` is the policy's configuration resolved once (the types,
the CPU tree, each type's tree options from `hints`, the reserved balloon's home) and
the pure steps on `state.BalloonsState` that the fill chain (`placement`), the rebuild
(`rebuild`) and the initial state share.  A balloon's size is ``max(minCPUs, ceil(sum
of its members' CPU requests))``, at least one CPU while it has containers, at most
``maxCPUs`` (`target_cpus`); `resize` grows or shrinks it by `allocation`'s picks,
keeping off CPUs under load (`loaded`).  A composite is sized through its components,
each for an equal share rounded down of ``max(requests, 1000 * minCPUs)``
(`component_share`), each picking by its own type (`resized`, `fill`); a new one gets
the components `component_types` chooses (``componentCreation``).  `commit` puts a
balloon in the state and shares idle CPUs as nri-plugins does (`share_idle`).  The
initial state makes every type's ``minBalloons`` in ``allocatorPriority`` order
(`creation_rank`, `initial`).
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from nri_resmgr.policy.balloons.allocation import CPUTree, TreeOptions, grow, level_cpus, shrink
from nri_resmgr.policy.balloons.config import ResolvedConfig, resolve_config
from nri_resmgr.policy.balloons.devices import device_hints, pod_resource_patterns
from nri_resmgr.policy.balloons.hints import tree_options
from nri_resmgr.policy.balloons.spec import (
    RESERVED,
    BalloonType,
    ComponentCreation,
    CPUPriority,
    TopologyLevel,
)
from nri_resmgr.policy.balloons.state import Balloon, BalloonsState, Member
from nri_resmgr.topology.cpuset import CPUSet, IDSet, union
from nri_resmgr.topology.model import Topology

__all__ = ["NO_CPUS", "Sizing"]

NO_CPUS: CPUSet = IDSet()


def _ceil_cpus(milli: int) -> int:
    return -(-milli // 1000)


class Sizing:
    """The resolved configuration and the sizing steps (module docstring)."""

    def __init__(self, *, topology: Topology, config: Mapping[str, Any]) -> None:
        self.topology = topology
        self.config: ResolvedConfig = resolve_config(topology, config)
        self.types: dict[str, BalloonType] = {t.name: t for t in self.config.types}
        self.tree = CPUTree.of(topology)
        #: the reserved balloon's home: the CPUs ``reservedResources`` names, or for a
        #: quantity those the CPU tree gives it in the initial state (`_find_reserved_home`)
        self.reserved_home: CPUSet = self.config.reserved
        self.tree_options: dict[str, TreeOptions] = tree_options(
            topology, self.config, self.reserved_home
        )
        if not self.reserved_home:
            self.reserved_home = self._find_reserved_home()
            self.tree_options = tree_options(topology, self.config, self.reserved_home)
        #: the balloons of the initial state, in order, and their CPUs: a rebuild makes
        #: the empty ones there again, when it can, and keeps their order
        initial = self.initial()
        self.initial_homes: dict[str, CPUSet] = (
            {} if isinstance(initial, str) else {n: b.cpus for n, b in initial.balloons.items()}
        )

    def for_member(self, t: BalloonType, m: Member) -> Sizing:
        """This sizing, or for a type with ``podresourceapi:`` devices and a member the
        kubelet gave some, one whose type options keep close to them first
        (`devices.device_hints`; their ``applyPodResourcesHints``)."""
        patterns = pod_resource_patterns(t.prefer_close_to_devices)
        near = device_hints(self.topology, self.config.available, patterns, m.devices)
        if not near:
            return self
        opts = self.tree_options[t.name]
        out = copy.copy(self)
        out.tree_options = {**self.tree_options, t.name: replace(opts, hints=near + opts.hints)}
        return out

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

    def _find_reserved_home(self) -> CPUSet:
        """The CPUs of the reserved balloon in the initial state, as the CPU tree picks
        them when ``reservedResources`` is a quantity (nri-plugins gives its reserved
        type no preferred CPUs then); empty when there is no initial state."""
        st = self.initial()
        if isinstance(st, str):
            return IDSet()  # initial_state says why
        return union(b.cpus for b in st.of_type(RESERVED))

    def share_idle(
        self, state: BalloonsState, *, add: CPUSet, remove: CPUSet = NO_CPUS
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
        return state.with_balloons(out)

    def commit(self, state: BalloonsState, balloon: Balloon) -> BalloonsState:
        """`state` with `balloon` made or resized, its CPUs shared as nri-plugins shares
        them (`share_idle`): after an inflation every balloon shares the idle CPUs of
        its domains, the new CPUs are shared by none; after a deflation the CPUs given
        back are shared by the balloons (this one too) in whose domains they are."""
        old = state.balloons.get(balloon.name)
        before = old.cpus if old is not None else NO_CPUS
        balloon = replace(balloon, shared=old.shared if old is not None else NO_CPUS)
        state = state.with_balloon(balloon)
        added, removed = balloon.cpus - before, before - balloon.cpus
        if added:
            return self.share_idle(state, add=self.config.available - state.used, remove=added)
        if removed:
            return self.share_idle(state, add=removed)
        return state

    def pick(self, state: BalloonsState, t: BalloonType, cpus: CPUSet, count: int) -> CPUSet:
        """`count` of `cpus` for a balloon of type `t` that has none yet (rebuild)."""
        got = grow(
            self.topology,
            self.tree,
            current=IDSet(),
            free=cpus,
            delta=count,
            opts=self.tree_options[t.name],
            loaded=self.loaded(state),
        )
        assert got is not None  # count <= len(cpus)
        return got

    def resize(
        self, state: BalloonsState, balloon: Balloon, milli: int, *, occupied: bool
    ) -> Balloon | str:
        """`balloon` sized for `milli` millicores (`needed_cpus`), or why it cannot be."""
        return self.resized(
            balloon,
            milli,
            used=state.used - balloon.cpus,
            loaded=self.loaded(state),
            occupied=occupied,
        )

    def resized(
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
            cpus = self.sized(b.cpus, t, want, used=used, loaded=loaded)
            if isinstance(cpus, str):
                return f"{b.name} {cpus}"
            return replace(b, cpus=cpus)
        share = self.component_share(b, milli)
        done: list[Balloon] = []
        for i, comp in enumerate(b.components):
            others = union(x.cpus for x in (*done, *b.components[i + 1 :]))
            got = self.resized(comp, share, used=used | others, loaded=loaded, occupied=occupied)
            if isinstance(got, str):
                return f"{b.name} component {got}"
            done.append(got)
        return replace(b, cpus=union(x.cpus for x in done), components=tuple(done))

    def loaded(self, state: BalloonsState) -> dict[TopologyLevel, CPUSet]:
        """Level -> the CPUs of every balloon whose type ``loads`` a class of that level
        (`allocation.grow` keeps off their domains there)."""
        out: dict[TopologyLevel, CPUSet] = {}
        for top in state.balloons.values():
            for b in top.walk():  # a composite's components load as their types do
                for level in self.tree_options[b.type].loads:
                    out[level] = out.get(level, IDSet()) | b.cpus
        return out

    def sized(
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
        `loaded` (`loaded`) at the levels `t` loads."""
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

    def new_balloon(
        self, state: BalloonsState, t: BalloonType, milli: int | None, *, seed: CPUSet = NO_CPUS
    ) -> Balloon | str:
        """A new instance of `t` sized for `milli` (None: empty), or why it cannot be made;
        it keeps what it can of the free CPUs of `seed` (rebuild: where its container
        runs now)."""
        fresh = self.unsized(state, t)
        if isinstance(fresh, str):
            return fresh
        occupied = milli is not None
        own = seed & (self.config.available - state.used)
        if own:
            fresh = self.fill(state, fresh, own, milli or 0, occupied=occupied)
        return self.resize(state, fresh, milli or 0, occupied=occupied)

    def unsized(
        self, state: BalloonsState, t: BalloonType, near: CPUSet | None = None
    ) -> Balloon | str:
        """A new instance of `t` without CPUs, a composite with new components of the
        types `component_types` chooses; or why it cannot be made (``maxBalloons``
        counts the state's instances of a type, not components, as nri-plugins does)."""
        mine = state.of_type(t.name)
        if t.max_balloons and len(mine) >= t.max_balloons:
            return f"no new {t.name} balloon: maxBalloons {t.max_balloons} reached"
        taken = {b.instance for b in mine}
        instance = next(i for i in range(len(mine) + 1) if i not in taken)
        components: list[Balloon] = []
        for ctype in self.component_types(state, t, near):
            got = self.unsized(state, ctype, near)
            if isinstance(got, str):
                return f"no new {t.name} balloon: its component {got}"
            components.append(got)
        return Balloon(type=t.name, instance=instance, cpus=IDSet(), components=tuple(components))

    def component_types(
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
            close = len(near & self.preferred(ctype)) if near else 0
            return (-close, sum(made[name] for name in self.made_of(ctype)), i)

        return [types[min(range(len(types)), key=key)]]

    def made_of(self, t: BalloonType) -> set[str]:
        """The names of `t` and of every type its components are made of, recursively."""
        out = {t.name}
        for comp in t.components:
            out |= self.made_of(self.types[comp.balloon_type])
        return out

    def preferred(self, t: BalloonType) -> CPUSet:
        """The CPUs a new `t` balloon wants first (its first close hint), or for a
        composite those of all its component types."""
        if t.components:
            return union(self.preferred(self.types[c.balloon_type]) for c in t.components)
        close = [h.cpus for h in self.tree_options[t.name].hints if not h.far]
        return close[0] if close else self.config.available

    def fill(
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
        `pool` when fewer, picked as its type grows (`pick`), from those of `first`
        alone when they are enough; a composite's are its components', each picked so
        (rebuild: spreading claimed or seeded CPUs over the components)."""
        if not b.components:
            t = self.types[b.type]
            n = min(self.target_cpus(t, milli, occupied=occupied), len(pool))
            inner = pool & first if first else IDSet()
            return replace(b, cpus=self.pick(state, t, inner if len(inner) >= n else pool, n))
        share = self.component_share(b, milli)
        done: list[Balloon] = []
        for comp in b.components:
            left = pool - union(x.cpus for x in done)
            done.append(self.fill(state, comp, left, share, occupied=occupied, first=first))
        return replace(b, cpus=union(x.cpus for x in done), components=tuple(done))

    def creation_rank(self, t: BalloonType) -> int:
        """Where `t`'s ``minBalloons`` balloons come in the initial state: by
        ``allocatorPriority``, high first and none (the option absent) last, as
        nri-plugins' setConfig creates them, so a high-priority type takes its CPUs
        before the reserved balloon (low, or normal when ``reservedResources`` is a
        cpuset); in type order within a priority."""
        prio = t.allocator_priority
        if t.name == RESERVED and self.config.reserved:
            prio = CPUPriority.NORMAL
        return list(CPUPriority).index(prio)

    def initial(self) -> BalloonsState | str:
        """The ``minBalloons`` balloons of every type, in `creation_rank` order; or why
        not."""
        st = BalloonsState(balloons={}, members={})
        for t in sorted(self.config.types, key=self.creation_rank):
            for _ in range(t.min_balloons):
                got = self.new_balloon(st, t, None)
                if isinstance(got, str):
                    return f"policy balloons: minBalloons of {t.name}: {got}"
                st = st.with_balloon(got)
        return self.share_idle(st, add=self.config.available - st.used)
