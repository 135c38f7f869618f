"""The topology-aware policy: the `Policy[S]` protocol and its hooks.

Theory of operation: the policy is built once from the machine (`Topology`) and its
configuration: `config.resolve_config` fixes the usable and reserved CPUs,
`pools.build_pool_tree` cuts the machine into the pool tree.  Both are immutable, and so
are the `placement.Placer` and `rebuild.Rebuilder` built from them.

For each container `preferences.container_request` decides *what* it gets (shared,
exclusive, isolated, mixed, reserved, or untouched; which memory kinds), and
`placement.Placer.place` *where* (the best-ranked offer of the candidate pools, or the
fallbacks).  The grant is added to a new state; the decision's updates are every other
container whose rendered CPUs or memory nodes differ between the old and the new state
(`decide.diff_updates`), which covers shared pools that shrank or grew anywhere in the
tree.  Only the containers whose rendering *can* differ are rendered for that diff
(`rendering.render_changed`): the subject and the shared users of pools whose shared set
changed, so a decision costs what it changes, not what is running (docs/policies.md,
"Performance").

``release`` drops the grant (init containers are released when they stop, so their CPUs
return to the pools before the app containers start).  ``update`` keeps the placement
when the request is unchanged and otherwise re-places the container, preferring its
current pool and CPUs.  ``rebuild`` is `rebuild.Rebuilder.rebuild` (read there).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

from immutables import Map

from nri_resmgr.model import (
    AnnotationError,
    Assignment,
    ContainerID,
    ContainerInfo,
    CPUKind,
    Decision,
)
from nri_resmgr.policy.base import Policy
from nri_resmgr.policy.cpu_allocator import CPUAllocator
from nri_resmgr.policy.cpu_classes import CPUClassUse
from nri_resmgr.policy.decide import (
    decide,
    decide_release,
    nothing_to_release,
)
from nri_resmgr.policy.irq_affinity import IrqContainer, IrqUse
from nri_resmgr.policy.kit.records import Meaning, RecordError
from nri_resmgr.policy.pool_report import PoolCPUs
from nri_resmgr.policy.sched_classes import (
    SchedulingClasses,
    build_scheduling_classes,
    with_scheduling,
)
from nri_resmgr.policy.topology_aware.config import SUBJECT, ResolvedConfig, resolve_config
from nri_resmgr.policy.topology_aware.hints import (
    check_strict,
    container_hints,
    hinted_pool,
    pick_preference,
)
from nri_resmgr.policy.topology_aware.invariants import check_invariants
from nri_resmgr.policy.topology_aware.placement import Placer
from nri_resmgr.policy.topology_aware.pools import PoolTree, build_pool_tree
from nri_resmgr.policy.topology_aware.preferences import CPU_CLASS, RequestMemo
from nri_resmgr.policy.topology_aware.priority import PriorityCPUs
from nri_resmgr.policy.topology_aware.rebuild import Rebuilder
from nri_resmgr.policy.topology_aware.records import MeaningMemo, grants_of
from nri_resmgr.policy.topology_aware.rendering import RenderMemo, render_changed
from nri_resmgr.policy.topology_aware.state import Grant, TopologyAwareState, supply_from_scratch
from nri_resmgr.topology.cpuset import CPUSet, IDSet, union
from nri_resmgr.topology.model import Topology

__all__ = ["TopologyAwarePolicy"]


def _check_cpu_class(container: ContainerInfo, grant: Grant) -> None:
    """A ``cpu-class`` annotation needs exclusive CPUs to set."""
    if grant.request.cpu_class and not grant.exclusive:
        raise AnnotationError(
            f"{container.pretty}: annotation {CPU_CLASS}: CPU class "
            f"{grant.request.cpu_class!r} invalid without exclusive CPUs; expected a "
            "Guaranteed container with whole CPUs"
        )


class TopologyAwarePolicy(Policy[TopologyAwareState]):
    """nri-plugins' topology-aware policy, as pure functions (module docstring)."""

    name: ClassVar[str] = "topology-aware"

    def __init__(self, *, topology: Topology, config: Mapping[str, Any]) -> None:
        self.topology = topology
        self.config: ResolvedConfig = resolve_config(topology, config)
        self.tree: PoolTree = build_pool_tree(
            topology,
            available=self.config.available,
            reserved=self.config.reserved,
            reserved_milli=self.config.reserved_milli,
        )
        opts = self.config.options
        self.scheduling: SchedulingClasses = build_scheduling_classes(
            opts.scheduling_classes,
            namespaces=opts.namespace_scheduling_classes,
            qos=opts.pod_qos_scheduling_classes,
            subject=SUBJECT,
        )
        self.placer = Placer.build(topology, self.tree, self.config)
        self.priorities: PriorityCPUs = self.placer.priorities
        self.allocator: CPUAllocator = self.placer.allocator
        self.meanings = MeaningMemo()
        self.renderings = RenderMemo()
        self.rebuilder = Rebuilder(self.placer, self.renderings)
        self.requests = RequestMemo(self.config)

    # ---- hooks -------------------------------------------------------------------------

    def initial_state(self) -> TopologyAwareState:
        return TopologyAwareState.empty(self.tree)

    def check(self, state: TopologyAwareState) -> None:
        """`invariants.check_invariants` of `state`, over its rendering as `render` gives
        it (a restart checks, then renders, the state it restored: one rendering)."""
        check_invariants(self.topology, state, rendered=self.render(state))

    def record(self, state: TopologyAwareState, container_id: ContainerID) -> Meaning | None:
        """The container's grant (`records.meaning_of`, kept by `records.MeaningMemo`)."""
        grant = state.grants.get(container_id)
        return self.meanings.of(grant, live=len(state.grants)) if grant is not None else None

    def restore(
        self, containers: Sequence[tuple[ContainerInfo, Meaning]], layout: Meaning | None
    ) -> TopologyAwareState:
        """The grants the records hold (`records.grants_of`), the supply derived anew; it
        keeps no layout (the pool tree is the configuration's)."""
        if layout is not None:
            raise RecordError(f"policy {self.name} keeps no layout record; found one")
        grants = Map(grants_of(containers, config=self.config, tree=self.tree))
        return TopologyAwareState(
            grants=grants, tree=self.tree, supply=supply_from_scratch(self.tree, grants.values())
        )

    def render(self, state: TopologyAwareState) -> dict[ContainerID, Assignment]:
        """Every container's assignment in `state` (`rendering.RenderMemo.render_many`: a
        state rendered again, as a Synchronize's check, restart and commit each render
        the one state, costs a lookup per container)."""
        return self.renderings.render_many(
            tree=self.tree, topology=self.topology, state=state, cids=state.grants
        )

    def pool_cpus(self, state: TopologyAwareState, assignments: Iterable[Assignment]) -> PoolCPUs:
        """The pool tree's reserved CPUs and every pool's shared CPUs, innermost first."""
        deepest_first = sorted(state.tree.pools, key=lambda p: (-p.depth, p.index))
        return PoolCPUs(
            reserved=state.tree.reserved,
            shared={p.name: state.supply.shared[p.index] for p in deepest_first},
        )

    def fallback(self, state: TopologyAwareState, container: ContainerInfo) -> str:
        """An exclusive request placed on shared CPUs (``fallbackToShared``), or a reserved
        one beyond the reserved capacity (`placement.Placer.fall_back`): what it asked
        for and got."""
        grant = state.grants.get(container.id)
        if grant is None or grant.kind is not CPUKind.SHARED:
            return ""
        asked = self.requests.of(container)
        if asked.kind is CPUKind.SHARED:
            return ""
        why = "fallbackToShared" if asked.kind is not CPUKind.RESERVED else "reserved capacity"
        return f"asked for {asked.kind} CPUs, placed on shared CPUs ({why})"

    def _render_changed(
        self, old: TopologyAwareState, new: TopologyAwareState, cid: ContainerID
    ) -> tuple[dict[ContainerID, Assignment], dict[ContainerID, Assignment]]:
        """The policy's `decide.RenderChanged`: `rendering.render_changed` for `cid`."""
        return render_changed(self.topology, old, new, (cid,), self.renderings)

    def cpu_class_use(self, state: TopologyAwareState) -> CPUClassUse:
        """CPU class -> CPUs: ``reservedPoolCPUClass`` on the reserved CPUs,
        ``sharedPoolCPUClass`` on the shared ones, and on each grant's exclusive CPUs its
        ``cpu-class`` annotation or ``defaultExclusiveCPUClass``; for the CPU class
        control (`nri_resmgr.control.cpuclass`)."""
        opts = self.config.options
        if not self.config.names_cpu_classes:
            return CPUClassUse(managed=self.config.available)  # O(1) on every event
        out: dict[str, CPUSet] = {}

        def add(name: str, cpus: CPUSet) -> None:
            if name and cpus:
                out[name] = out.get(name, IDSet()) | cpus

        reserved = self.config.reserved
        add(opts.reserved_pool_cpu_class, reserved)
        add(opts.shared_pool_cpu_class, union(state.supply.shared) - reserved)
        for g in state.grants.values():
            add(g.request.cpu_class or opts.default_exclusive_cpu_class, g.exclusive)
        return CPUClassUse(cpus=out, managed=self.config.available, classes=opts.cpu_classes)

    def irq_use(self, state: TopologyAwareState) -> IrqUse:
        """Interrupt wishes: each grant with exclusive CPUs and an ``irq-affinity``
        annotation (`irq_affinity.plan_affinities`; their ``applyIrqAffinity``); the
        annotated grants are the state's index (`state.Supply.irq`), not a walk of all."""
        return IrqUse(
            allowed=self.config.available,
            controllable=self.config.options.controllable_interrupts,
            annotated=True,
            containers=tuple(
                IrqContainer(str(cid), g.exclusive, g.request.irq_affinity)
                for cid in sorted(state.supply.irq)
                if (g := state.grants[cid]).request.irq_affinity is not None and g.exclusive
            ),
            configured=bool(state.supply.irq),
        )

    # ---- the protocol ------------------------------------------------------------------

    def allocate(
        self, state: TopologyAwareState, container: ContainerInfo
    ) -> Decision[TopologyAwareState]:
        if container.id in state.grants:
            return self.update(state, container)
        request = self.requests.of(container)
        scheduling = self.scheduling.resolve(container)
        hints = container_hints(container, self.topology)
        grant, reason = self.placer.place(
            state,
            container,
            request,
            hint=hinted_pool(self.tree, hints),
            prefer=pick_preference(hints),
        )
        _check_cpu_class(container, grant)
        new = state.with_grant(grant)
        decision = decide(self._render_changed, state, new, container.id, reason)
        if decision.assignment is not None:
            check_strict(container, hints, decision.assignment)
        return with_scheduling(decision, scheduling)

    def release(
        self, state: TopologyAwareState, container_id: ContainerID
    ) -> Decision[TopologyAwareState]:
        if container_id not in state.grants:
            return nothing_to_release(state)
        new = state.without(container_id)
        return decide_release(self._render_changed, state, new, container_id)

    def update(
        self, state: TopologyAwareState, container: ContainerInfo
    ) -> Decision[TopologyAwareState]:
        old = state.grants.get(container.id)
        if old is None:
            return self.allocate(state, container)
        request = self.requests.of(container)
        if request == old.request:
            return decide(self._render_changed, state, state, container.id, "unchanged")
        without = state.without(container.id)
        grant, reason = self.placer.place(
            without, container, request, hint=old.pool, prefer=[old.exclusive]
        )
        _check_cpu_class(container, grant)
        new = without.with_grant(grant)
        return decide(self._render_changed, state, new, container.id, f"updated: {reason}")

    def rebuild(self, containers: Sequence[ContainerInfo]) -> Decision[TopologyAwareState]:
        return self.rebuilder.rebuild(containers)
