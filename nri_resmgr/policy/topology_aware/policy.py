"""The topology-aware policy: pools, offers, and decisions.

Theory of operation: the policy is built once from the machine (`Topology`) and its
configuration: `config.resolve_config` fixes the usable and reserved CPUs,
`pools.build_pool_tree` cuts the machine into the pool tree.  Both are immutable.

For each container `preferences.container_request` decides *what* it gets (shared,
exclusive, isolated, mixed, reserved, or untouched; which memory kinds).  `_place` then
decides *where*: every candidate pool makes an offer against the current immutable state
(`offers.make_offer`), pools that cannot fit are dropped, and the rest are ranked by the
sort key documented in `scoring`.  (Offers are built in the order of the best key each
pool could reach, `scoring.key_bound`, and no more are built once none of the remaining
pools can win: same winner, usually one offer instead of one per pool.)  The best offer's
grant is added to a new state; the decision's updates are every other container whose
rendered CPUs or memory nodes differ between the old and the new state
(`decide.diff_updates`), which covers shared pools that shrank or grew anywhere in the
tree.  Only the containers whose rendering *can* differ are rendered for that diff
(`rendering.render_changed`): the subject and the shared users of pools whose shared set
changed, so a decision costs what it changes, not what is running (docs/policies.md,
"Performance").

If no pool fits an exclusive request and ``fallbackToShared`` is set, the whole request
is retried as shared before failing.  A reserved request beyond the reserved capacity
(``reservedResources.cpu``, in millicores: 750m is 750m) runs on the root pool's shared
CPUs instead, as in nri-plugins.  Mixed requests do not fall back: a mixed cpuset
(own CPUs plus a shared set) could not be told apart from a shared one at rebuild.
Failures are `AllocationError`s naming the container, the request and each pool's reason.

``release`` drops the grant (init containers are released when they stop, so their CPUs
return to the pools before the app containers start).  ``update`` keeps the placement
when the request is unchanged and otherwise re-places the container, preferring its
current pool and CPUs.

``rebuild`` reconstructs the state from what the runtime reports:

1. every exclusive container whose current CPUs are a valid grant on their own (the
   right count, usable, not reserved, all isolated or all sharable as its preference
   says, in a pool that can give them up) is re-granted exactly those CPUs, in the
   deepest such pool whose memory matches the current mems.  Claims no other report
   overlaps go first, then those another container's cpuset overlaps, then those another
   claim overlaps, smaller first (`common.order_claims`), each only while it stays valid
   next to those kept (the report of a container that opted out of pinning counts for
   no CPU anywhere in a rebuild: it may be anything): a claim of every CPU (a fail-open
   creation, a shared container's cpuset) never makes a valid grant move, and a
   container that fell back to shared on exactly its count of CPUs (under
   hide-hyperthreads: reporting one thread on each core of that shared set; the set
   left by the kept claims and by the mixed containers, whose own CPUs may be any of
   their report's) does not take them from the grants that left them shared; since a
   pool nobody shares may be sliced empty, such a claim can be valid and still push the
   shared containers (or a mixed one) placed next off their CPUs: when another pinned
   container's report (shared or exclusive) overlaps such a kept claim, the rebuild is
   retried with those claimants read as fallen back to shared, and the retry wins if
   it overcommits fewer containers, or as many and moves fewer, and leaves those
   claimants on the CPUs they report;
2. all others are placed as if new (exclusive, then mixed, then shared, then reserved,
   then untouched; until its turn, each shared or mixed container holds the pool of its
   report with a 0m stand-in, so that no pool it shares is sliced empty before), with
   the pool whose rendering matches their current cpuset/mems as a hint (first in the
   sort key) and their current CPUs preferred when slicing (under hide-hyperthreads,
   the CPUs shown before their hidden siblings).  A reserved container that reports the
   root pool's shared set ran beyond the reserved capacity and stays there, even when
   that capacity is free now (as it would while the daemon runs).  One that fits
   nowhere by its request (or whose annotations are malformed) still runs: it is
   *overcommitted* on the shared CPUs of the best pool with no demand counted (or on
   the reserved CPUs when no pool has a shared CPU; `_overcommit`), named in the reason,
   rather than left where it is, which could be on CPUs now exclusive to another;
3. the decision's updates are the containers whose rendering differs from what the
   runtime reports.  So after a rebuild no CPU exclusive to one container is in the
   cpuset of another (the restart rule), except for containers that opted out of
   pinning (``cpu.preserve``, ``pinCPU: false``).
"""

from __future__ import annotations

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
)
from nri_resmgr.policy.base import Policy
from nri_resmgr.policy.common import one_thread_per_core, order_claims
from nri_resmgr.policy.cpu_allocator import CPUAllocator
from nri_resmgr.policy.cpu_classes import CPUClassUse
from nri_resmgr.policy.decide import (
    decide,
    decide_release,
    nothing_to_release,
)
from nri_resmgr.policy.kit.rebuild import each_once, holders_per_cpu, moved
from nri_resmgr.policy.kit.records import Meaning
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
from nri_resmgr.policy.topology_aware.invariants import check_addition, check_invariants
from nri_resmgr.policy.topology_aware.offers import (
    Offer,
    allocatable_by_pool,
    burst_key,
    exact_offer,
    is_burst_ranked,
    make_offer,
)
from nri_resmgr.policy.topology_aware.pools import Pool, PoolTree, build_pool_tree
from nri_resmgr.policy.topology_aware.preferences import (
    ALL_MEMORY,
    CPU_CLASS,
    ContainerRequest,
    container_request,
)
from nri_resmgr.policy.topology_aware.priority import PriorityCPUs, priority_cpus
from nri_resmgr.policy.topology_aware.records import grant_of, meaning_of
from nri_resmgr.policy.topology_aware.rendering import render_all, render_changed
from nri_resmgr.policy.topology_aware.reports import (
    claim_of,
    hint_for,
    missing_from_shared_views,
    unreadable_request,
)
from nri_resmgr.policy.topology_aware.scoring import (
    OfferKey,
    affinity_by_pool,
    best_offer,
    key_bound,
    offer_key,
)
from nri_resmgr.policy.topology_aware.state import (
    Grant,
    TopologyAwareState,
    supply_from_scratch,
)
from nri_resmgr.topology.cpuset import CPUSet, IDSet, union
from nri_resmgr.topology.model import Topology

__all__ = ["TopologyAwarePolicy"]

_PHASE_ORDER = {
    CPUKind.EXCLUSIVE: 0,
    CPUKind.MIXED: 1,
    CPUKind.SHARED: 2,
    CPUKind.RESERVED: 3,
    CPUKind.NONE: 4,
}


def _check_cpu_class(container: ContainerInfo, grant: Grant) -> None:
    """A ``cpu-class`` annotation needs exclusive CPUs to set."""
    if grant.request.cpu_class and not grant.exclusive:
        raise AnnotationError(
            f"{container.pretty}: annotation {CPU_CLASS}: CPU class "
            f"{grant.request.cpu_class!r} invalid without exclusive CPUs; expected a "
            "Guaranteed container with whole CPUs"
        )


def _as_shared(request: ContainerRequest) -> ContainerRequest:
    """`request` with its whole CPUs turned into shared millicores (fallbackToShared)."""
    return replace(
        request,
        kind=CPUKind.SHARED,
        full=0,
        shared_milli=1000 * request.full + request.shared_milli,
        prefer_isolated=False,
    )


def _beyond_reserved(request: ContainerRequest) -> ContainerRequest:
    """A reserved `request` as it runs beyond the reserved capacity: shared (in the root
    pool, `_fall_back`)."""
    return replace(request, kind=CPUKind.SHARED)


def _pins_cpus(request: ContainerRequest) -> bool:
    """Whether the policy decides the CPUs of a container with `request` (not opted out)."""
    return request.pin_cpu and request.kind is not CPUKind.NONE


@dataclass(frozen=True, slots=True)
class _Rebuilt:
    """One pass of a rebuild: the state, its notes, and what the retry looks at."""

    state: TopologyAwareState
    notes: tuple[str, ...]
    #: the containers whose rendering differs from their report
    updates: tuple[Assignment, ...]
    #: containers that fit nowhere by their request
    overcommitted: tuple[ContainerID, ...]
    #: kept claims that are exactly a pool's shared set (`_shared_like`) and that
    #: another container's report overlaps
    kept_shared_like: frozenset[ContainerID]

    @property
    def cost(self) -> tuple[int, int]:
        """Containers overcommitted, then containers moved: the smaller pass wins."""
        return (len(self.overcommitted), len(self.updates))


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
        self.priorities: PriorityCPUs = priority_cpus(topology)
        #: nri-plugins' CPU allocator on this machine: which CPUs each grant takes
        self.allocator = CPUAllocator(
            topology,
            high=self.priorities.high,
            normal=self.priorities.normal,
            low=self.priorities.low,
            hybrid=self.priorities.hybrid,
        )

    # ---- helpers -----------------------------------------------------------------------

    def initial_state(self) -> TopologyAwareState:
        return TopologyAwareState.empty(self.tree)

    def check(self, state: TopologyAwareState) -> None:
        """`invariants.check_invariants` of `state`."""
        check_invariants(self.topology, state)

    def record(self, state: TopologyAwareState, container_id: ContainerID) -> Meaning | None:
        """The container's grant (`records.meaning_of`)."""
        grant = state.grants.get(container_id)
        return meaning_of(grant) if grant is not None else None

    def restore(self, containers: Sequence[tuple[ContainerInfo, Meaning]]) -> TopologyAwareState:
        """The grants the records hold (`records.grant_of`), the supply derived anew."""
        grants = {c.id: grant_of(c, m, config=self.config, tree=self.tree) for c, m in containers}
        return TopologyAwareState(
            grants=grants, tree=self.tree, supply=supply_from_scratch(self.tree, grants.values())
        )

    def render(self, state: TopologyAwareState) -> dict[ContainerID, Assignment]:
        """Every container's assignment in `state`."""
        return render_all(self.topology, state)

    def pool_cpus(self, state: TopologyAwareState, assignments: Iterable[Assignment]) -> PoolCPUs:
        """The pool tree's reserved CPUs and every pool's shared CPUs, innermost first."""
        deepest_first = sorted(state.tree.pools, key=lambda p: (-p.depth, p.index))
        return PoolCPUs(
            reserved=state.tree.reserved,
            shared={p.name: state.supply.shared[p.index] for p in deepest_first},
        )

    def fallback(self, state: TopologyAwareState, container: ContainerInfo) -> str:
        """An exclusive request placed on shared CPUs (``fallbackToShared``), or a reserved
        one beyond the reserved capacity (`_fall_back`): what it asked for and got."""
        grant = state.grants.get(container.id)
        if grant is None or grant.kind is not CPUKind.SHARED:
            return ""
        asked = container_request(container, self.config)
        if asked.kind is CPUKind.SHARED:
            return ""
        why = "fallbackToShared" if asked.kind is not CPUKind.RESERVED else "reserved capacity"
        return f"asked for {asked.kind} CPUs, placed on shared CPUs ({why})"

    def _render_changed(
        self, old: TopologyAwareState, new: TopologyAwareState, cid: ContainerID
    ) -> tuple[dict[ContainerID, Assignment], dict[ContainerID, Assignment]]:
        """The policy's `decide.RenderChanged`: `rendering.render_changed` for `cid`."""
        return render_changed(self.topology, old, new, (cid,))

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

    def _candidates(self, request: ContainerRequest, *, root_only: bool) -> list[Pool]:
        if root_only:
            return [self.tree.root]
        if request.kind is CPUKind.RESERVED:
            return [self.tree.pools[self.tree.reserved_pool]]
        if request.kind is CPUKind.NONE:
            return [self.tree.root]
        return list(self.tree.pools)

    def _place(
        self,
        state: TopologyAwareState,
        container: ContainerInfo,
        request: ContainerRequest,
        *,
        hint: int | None,
        prefer: Sequence[CPUSet],
        root_only: bool = False,
    ) -> tuple[Grant, str]:
        supply = state.supply
        affinities = affinity_by_pool(state, self.tree, container_id=container.id, request=request)
        # the Burstable components, once per pool (offers.burst_key)
        candidates = self._candidates(request, root_only=root_only)
        bursts = {pool.index: (0, 0) for pool in candidates}
        rooms = allocatable_by_pool(self.tree, supply)
        if is_burst_ranked(request):
            for pool in candidates:
                bursts[pool.index] = burst_key(
                    self.tree, supply, pool, request, room=rooms[pool.index]
                )
        # offers in the order of the best key each pool could reach; once the best offer
        # so far beats the bound of the next pool it beats all the rest (scoring.key_bound)
        bounded = sorted(
            [
                (
                    key_bound(
                        pool,
                        tree=self.tree,
                        supply=supply,
                        room=rooms[pool.index],
                        request=request,
                        hinted=pool.index == hint,
                        affinity_score=affinities.get(pool.index, 0),
                        priorities=self.priorities,
                        burst=bursts[pool.index],
                    ),
                    pool,
                )
                for pool in candidates
            ],
            key=lambda bp: bp[0],
        )
        offers: list[Offer] = []
        failed: list[tuple[int, str]] = []
        best_key: OfferKey | None = None
        for bound, pool in bounded:
            if best_key is not None and bound > best_key:
                break
            got = make_offer(
                tree=self.tree,
                topology=self.topology,
                allocator=self.allocator,
                supply=supply,
                pool=pool,
                container_id=container.id,
                pod_id=container.pod.id,
                namespace=container.namespace,
                request=request,
                prefer=prefer,
                priorities=self.priorities,
                burst=bursts[pool.index],
                rooms=rooms,
            )
            if isinstance(got, Offer):
                offers.append(got)
                key = offer_key(
                    got,
                    hinted=pool.index == hint,
                    affinity_score=affinities.get(pool.index, 0),
                    tree=self.tree,
                )
                best_key = key if best_key is None else min(best_key, key)
            else:
                failed.append((pool.index, f"{pool.name}: {got}"))
        reasons = [reason for _, reason in sorted(failed)]
        best = best_offer(offers, hint=hint, affinities=affinities, tree=self.tree)
        if best is not None:
            return best.grant, f"{best.grant.kind} in {best.pool.name}"
        message = f"{container.pretty}: no pool can fit {request.describe()}; " + "; ".join(reasons)
        return self._fall_back(state, container, request, message, hint=hint, prefer=prefer)

    def _fall_back(
        self,
        state: TopologyAwareState,
        container: ContainerInfo,
        request: ContainerRequest,
        message: str,
        *,
        hint: int | None,
        prefer: Sequence[CPUSet],
    ) -> tuple[Grant, str]:
        """Where a request no pool fits goes instead; `AllocationError(message)` if nowhere.

        An exclusive one with ``fallbackToShared``: shared, anywhere.  A reserved one
        beyond the reserved capacity: shared in the root pool, as nri-plugins does with
        what it logs as a likely misconfiguration (named in the reason here).
        """
        fallback = self.config.options.fallback_to_shared and not request.require_isolated
        if request.kind is CPUKind.EXCLUSIVE and fallback:
            shared = _as_shared(request)
            grant, where = self._place(state, container, shared, hint=hint, prefer=prefer)
            return grant, f"{where} (fallbackToShared: {message})"
        if request.kind is CPUKind.RESERVED:
            grant, where = self._place(
                state,
                container,
                _beyond_reserved(request),
                hint=hint,
                prefer=prefer,
                root_only=True,
            )
            return grant, f"{where} (reserved capacity exceeded: {message})"
        raise AllocationError(message)

    # ---- the protocol ------------------------------------------------------------------

    def allocate(
        self, state: TopologyAwareState, container: ContainerInfo
    ) -> Decision[TopologyAwareState]:
        if container.id in state.grants:
            return self.update(state, container)
        request = container_request(container, self.config)
        scheduling = self.scheduling.resolve(container)
        hints = container_hints(container, self.topology)
        grant, reason = self._place(
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
        request = container_request(container, self.config)
        if request == old.request:
            return decide(self._render_changed, state, state, container.id, "unchanged")
        without = state.without(container.id)
        grant, reason = self._place(
            without, container, request, hint=old.pool, prefer=[old.exclusive]
        )
        _check_cpu_class(container, grant)
        new = without.with_grant(grant)
        return decide(self._render_changed, state, new, container.id, f"updated: {reason}")

    def rebuild(self, containers: Sequence[ContainerInfo]) -> Decision[TopologyAwareState]:
        notes: list[str] = []
        containers = each_once(containers)
        requests: dict[ContainerID, ContainerRequest] = {}
        for c in containers:
            try:
                requests[c.id] = container_request(c, self.config)
            except AnnotationError as exc:
                notes.append(f"overcommitted: {exc}")
                requests[c.id] = unreadable_request(pin_cpu=self.config.options.pin_cpu)
        best = self._rebuild_once(containers, requests, skip=frozenset())
        if best.kept_shared_like:
            # a claim that is exactly a pool's shared set is what a container that fell
            # back to shared reports; kept, it may push the shared containers placed
            # next off their CPUs: the rebuild without those claims wins when it
            # overcommits fewer containers, or as many and moves fewer, and leaves
            # those claimants on the CPUs they report (shared now)
            second = self._rebuild_once(containers, requests, skip=best.kept_shared_like)
            moved = {a.container_id for a in second.updates}
            if second.cost < best.cost and moved.isdisjoint(best.kept_shared_like):
                best = second
        notes.extend(best.notes)
        return Decision(
            state=best.state, updates=best.updates, reason="; ".join(["rebuilt", *notes])
        )

    def _rebuild_once(
        self,
        containers: Sequence[ContainerInfo],
        requests: Mapping[ContainerID, ContainerRequest],
        *,
        skip: frozenset[ContainerID],
    ) -> _Rebuilt:
        """Steps 1 and 2 of a rebuild (module docstring), not keeping the claims of `skip`."""
        st = self.initial_state()
        notes: list[str] = []
        overcommitted: list[ContainerID] = []
        requests = dict(requests)
        unique = {c.id: c for c in containers}
        # how many reports hold each CPU; one of a container that opted out of pinning
        # (cpu.preserve, pinCPU: false) holds none: we never set it, it may be every CPU
        holders = holders_per_cpu(c.current_cpus for c in containers if _pins_cpus(requests[c.id]))
        missing = missing_from_shared_views(self.tree, containers, requests)
        # the threads a pinned hide-hyperthreads report may hide: the higher siblings
        # of its CPUs (the rendering shows the lowest thread held on each core, so a
        # lower sibling is not held)
        hidden_by = {
            c.id: frozenset(
                sib
                for cpu in (c.current_cpus or IDSet()) & self.tree.root.cpus
                for sib in self.topology.siblings(cpu)
                if sib > cpu
            )
            for c in containers
            if requests[c.id].hide_hyperthreads and _pins_cpus(requests[c.id])
        }
        hidden = holders_per_cpu(IDSet(cpus) for cpus in hidden_by.values())

        # 1. keep valid exclusive placements exactly: of the claims valid on their own,
        # those no other report overlaps first, then those only other pinned containers'
        # cpusets overlap, then the ones overlapping other claims, smaller first
        # (`common.order_claims`); a claim is kept only while it stays valid next to
        # those kept before it.  Other containers' cpusets (a shared one on every CPU
        # after a fail-open, a claim of the wrong size) only order it, never drop it.
        claims: dict[ContainerID, CPUSet] = {}
        for c in containers:
            held = claim_of(
                self.tree, self.topology, c, requests[c.id], holders=holders, missing=missing
            )
            if held is not None and self._reclaim(st, c, requests[c.id], held) is not None:
                claims[c.id] = held
        others = [
            c.current_cpus
            for c in containers
            if c.id not in claims and c.current_cpus is not None and _pins_cpus(requests[c.id])
        ]
        shown = {
            cid: (unique[cid].current_cpus or IDSet()) if requests[cid].hide_hyperthreads else None
            for cid in claims
        }
        # a mixed container's own CPUs are CPUs of its report in no other pinned
        # report (step 2 picks them)
        mixed = IDSet(
            cpu
            for c in containers
            if requests[c.id].kind is CPUKind.MIXED and _pins_cpus(requests[c.id])
            for cpu in (c.current_cpus or IDSet())
            if holders[cpu] == 1
        )
        shared_like = self._shared_like(claims, others, shown=shown, mixed=mixed)
        # those another pinned container's report overlaps (a shared one next to a
        # claimant that fell back to shared shows the same CPUs; an unpinned one's
        # report, perhaps every CPU, shows nothing) are the ones that may have fallen
        # back next to it: the retry (`rebuild`) leaves them shared
        seen = union(others)
        kept_shared_like: set[ContainerID] = set()
        for cid in order_claims(claims, others=others, shared_like=shared_like):
            if cid in skip:
                continue
            grant = self._reclaim(st, unique[cid], requests[cid], claims[cid])
            if grant is not None:
                st = st.with_grant(grant)
                if cid in shared_like and not claims[cid].isdisjoint(seen):
                    kept_shared_like.add(cid)
        # 2. place everyone else, hinted by where they are now
        position = {c.id: i for i, c in enumerate(containers)}
        pending = [c for c in containers if c.id not in st.grants]
        if self.config.options.fallback_to_shared:
            # one that fell back to shared earlier stays shared: it runs on a cpuset that
            # is not its own whole CPUs (wrong size, or exactly some pool's shared set);
            # one with no cpuset at all (created while we were down) is placed as new
            supply = st.supply
            for c in pending:
                req = requests[c.id]
                cur = c.current_cpus
                if req.kind is not CPUKind.EXCLUSIVE or not req.pin_cpu or not cur:
                    continue
                views = [
                    one_thread_per_core(self.topology, v) if req.hide_hyperthreads else v
                    for v in supply.shared
                ]
                if req.hide_hyperthreads and cur <= self.tree.root.cpus:
                    # N CPUs show as one thread on each of N / threads-per-core .. N cores
                    cores = len(self.topology.cores_of(cur))
                    tpc = self.topology.threads_per_core()
                    wrong = not (cores <= req.full <= tpc * cores)
                else:
                    wrong = len(cur) != req.full
                # (in the retry, the skipped claims are read as fallen back: `rebuild`)
                if wrong or cur in views or c.id in skip:
                    requests[c.id] = _as_shared(req)
        pending.sort(
            key=lambda c: (
                _PHASE_ORDER[requests[c.id].kind],
                -requests[c.id].full,
                position[c.id],
            )
        )
        # the shared containers still to place hold their pools now, with a 0m
        # stand-in where their report lies: an exclusive or mixed container placed
        # before them may not slice those shared sets empty (a pool nobody shares may
        # be); each stand-in is dropped just before its container is placed
        for c in pending:
            stand_in = self._stand_in(st, c, requests[c.id])
            if stand_in is not None:
                st = st.with_grant(stand_in)
        for c in pending:
            req = requests[c.id]
            st = st.without(c.id)
            # one that ran beyond the reserved capacity stays where it runs, even if
            # the capacity it lacked is free now (the live policy would not move it)
            root_only = req.kind is CPUKind.RESERVED and self._runs_beyond_reserved(st, c, req)
            if root_only:
                req = _beyond_reserved(req)
            hint = hint_for(self.topology, st, c, req)
            mine = union(
                self.topology.siblings(cpu) if req.hide_hyperthreads else IDSet([cpu])
                for cpu in (c.current_cpus or IDSet()) & self.tree.root.cpus
            )
            # in nobody else's cpuset (a hidden sibling counts only if no one sees it);
            # of those, the visible ones are not hidden behind another's
            # hide-hyperthreads view either (a view of one thread a core may hold the
            # whole cores), and go first
            own = (c.current_cpus or IDSet()) if _pins_cpus(req) else IDSet()
            lonely = IDSet(cpu for cpu in mine if holders[cpu] - (cpu in own) == 0)
            mine_hidden = hidden_by.get(c.id, frozenset())
            visible = IDSet(cpu for cpu in lonely if hidden[cpu] - (cpu in mine_hidden) == 0)
            # a mixed container's own CPUs are the ones other shared views lack
            evidence = IDSet(cpu for cpu in lonely if missing[cpu])
            # under hide-hyperthreads, a CPU shown before its hidden sibling: the
            # rendering shows the lowest thread held on each core, so a shown CPU that
            # is a higher thread is held while its lower sibling is not
            prefer = [evidence, visible & own, visible, lonely & own, lonely]
            try:
                grant, _ = self._place(st, c, req, hint=hint, prefer=prefer, root_only=root_only)
            except AllocationError as exc:
                # it runs anyway: on shared CPUs, off everyone's exclusive ones
                notes.append(f"overcommitted: {exc}")
                overcommitted.append(c.id)
                grant = self._overcommit(st, c, req, hint=hint, notes=notes)
            st = st.with_grant(grant)
        rendered = render_all(self.topology, st)
        return _Rebuilt(
            state=st,
            notes=tuple(notes),
            updates=moved(containers, rendered),
            overcommitted=tuple(overcommitted),
            kept_shared_like=frozenset(kept_shared_like),
        )

    def _runs_beyond_reserved(
        self, state: TopologyAwareState, c: ContainerInfo, req: ContainerRequest
    ) -> bool:
        """Whether pinned `c` reports what a reserved request beyond the reserved
        capacity renders: the root pool's shared set in `state` (rebuild's reserved
        phase, when every exclusive and mixed container holds its CPUs), never the
        reserved CPUs, which no shared set holds."""
        view = state.supply.shared[self.tree.root.index]
        if req.hide_hyperthreads:
            view = one_thread_per_core(self.topology, view)
        return req.pin_cpu and bool(view) and c.current_cpus == view

    def _stand_in(
        self, state: TopologyAwareState, c: ContainerInfo, req: ContainerRequest
    ) -> Grant | None:
        """A 0m shared grant of `c` in the deepest pool holding its report, if `c` is a
        pinned shared or mixed container reporting CPUs of a pool that still has shared
        CPUs."""
        view = (c.current_cpus or IDSet()) & self.tree.root.cpus
        if req.kind not in (CPUKind.SHARED, CPUKind.MIXED) or not _pins_cpus(req) or not view:
            return None
        pool = self.tree.deepest_containing(view)[0]
        if not state.supply.shared[pool]:
            return None
        # (not a container with no CPU request: the 1m it would keep back, which the
        # containers placed before it in the live order never saw, could refuse them)
        stand_in = replace(
            req,
            kind=CPUKind.SHARED,
            full=0,
            shared_milli=0,
            memory_bytes=0,
            zero_cpu_request=False,
        )
        return Grant(
            container_id=c.id,
            pod_id=c.pod.id,
            namespace=c.namespace,
            pool=pool,
            kind=CPUKind.SHARED,
            exclusive=IDSet(),
            request=stand_in,
        )

    def _overcommit(
        self,
        state: TopologyAwareState,
        c: ContainerInfo,
        req: ContainerRequest,
        *,
        hint: int | None,
        notes: list[str],
    ) -> Grant:
        """A grant for a running container that fits nowhere by its request (rebuild).

        The runtime runs it whatever we decide, and leaving it where it is could leave
        it on CPUs now exclusive to another container.  So it goes on the shared CPUs of
        the best pool (its hint first) with no demand counted: it competes for shared
        CPU time by its weight, and moves with the shared set from now on.  Reserved
        requests stay on the reserved CPUs, and so does anyone when no pool has a shared
        CPU at all (every usable CPU isolated): reserved CPUs are never exclusive.  Only a
        container opted out of pinning is left untouched.
        """
        kind = req.kind if req.kind in (CPUKind.RESERVED, CPUKind.NONE) else CPUKind.SHARED
        loose = replace(
            req,
            kind=kind,
            full=0,
            shared_milli=0,
            prefer_isolated=False,
            memory_kinds=ALL_MEMORY,
            memory_bytes=0,
        )
        try:
            grant, _ = self._place(state, c, loose, hint=hint, prefer=())
        except AllocationError as exc:
            notes.append(f"on the reserved CPUs: {exc}")
            reserved = replace(loose, kind=CPUKind.RESERVED, pin_memory=False)
            grant, _ = self._place(state, c, reserved, hint=None, prefer=())
        return grant

    def _shared_like(
        self,
        claims: Mapping[ContainerID, CPUSet],
        others: Sequence[CPUSet],
        *,
        shown: Mapping[ContainerID, CPUSet | None],
        mixed: CPUSet,
    ) -> set[ContainerID]:
        """The claims that are exactly some pool's shared CPUs next to the clear claims
        and the mixed containers.

        A clear claim overlaps no other claim and no other container's cpuset, as an
        exclusive grant rendered as it is does.  A mixed container's own whole CPUs are
        among the CPUs of its report that no other pinned report holds (`mixed`); which
        ones is decided only later, so each of those that a claim lacks is taken as
        possibly held.  A claim that is exactly the CPUs the clear claims and
        the mixed containers (other than itself) leave shared in some pool is what a
        container that fell back to shared (``fallbackToShared``) reports when that
        shared set has its count of CPUs: a valid claim on its own, which must not take
        the CPUs of the grants that left them shared (`common.order_claims` keeps it
        after them; the retry reads it as shared).  Under hide-hyperthreads (`shown`
        maps such a claim to the cpuset reported) the claim adds hidden threads to what
        was shown, so what is compared is the shown view: one thread on each core of
        that shared set.
        """
        holders = holders_per_cpu(claims.values())
        seen = union(others)
        clear = union(
            cpus
            for cpus in claims.values()
            if cpus.isdisjoint(seen) and all(holders[cpu] == 1 for cpu in cpus)
        )
        out = set()
        for cid, cpus in claims.items():
            rest = (clear | mixed) - cpus
            view = shown.get(cid)
            if any(
                (view is None and pool.sharable - rest == cpus)
                or (
                    view is not None
                    and one_thread_per_core(self.topology, pool.sharable - rest) == view
                )
                for pool in self.tree.pools
            ):
                out.add(cid)
        return out

    def _reclaim(
        self, state: TopologyAwareState, c: ContainerInfo, req: ContainerRequest, cur: CPUSet
    ) -> Grant | None:
        """An exclusive grant of `cur` (`reports.claim_of` `c`), if that is still valid."""
        supply = state.supply
        root = self.tree.root
        if not cur.isdisjoint(supply.used):
            return None
        isolated = cur <= root.isolated
        if not (isolated and req.prefer_isolated) and not cur <= root.sharable:
            return None
        if req.require_isolated and not isolated:
            return None
        pools = self.tree.deepest_containing(cur)
        if req.pin_memory and c.current_mems is not None:
            matching = [
                i for i in pools if self.tree.pools[i].mems_of(req.memory_kinds) == c.current_mems
            ]
            pools = matching or pools
        for index in pools:
            offer = exact_offer(
                tree=self.tree,
                supply=supply,
                pool=self.tree.pools[index],
                container_id=c.id,
                pod_id=c.pod.id,
                namespace=c.namespace,
                request=req,
                kind=CPUKind.ISOLATED if isolated else CPUKind.EXCLUSIVE,
                cpus=cur,
            )
            if isinstance(offer, Offer) and not self._check_addition(state, offer.grant):
                return offer.grant
        return None

    def _check_addition(self, state: TopologyAwareState, grant: Grant) -> tuple[str, ...]:
        """What `state` plus `grant` breaks of the invariants; `state` must keep them.

        Rebuild's first step starts from the empty state and adds a grant only once this
        finds nothing, so the precondition holds there; the check then costs O(pools),
        not O(containers kept so far) (`invariants.check_addition`).
        """
        return check_addition(self.topology, state, grant)
