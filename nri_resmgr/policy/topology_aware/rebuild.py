"""Synchronize: the topology-aware state rebuilt from what the runtime reports.

Theory of operation: `Rebuilder.rebuild` reconstructs the state from the containers the
runtime reports (their ``current_cpus``/``current_mems``), placing with the policy's
`placement.Placer`:

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
   then shared ones with no CPU request, whose 1m could refuse those placed after them,
   then untouched; until its turn, each shared or mixed container holds the pool of
   its report with a 0m stand-in, so that no pool it shares is sliced empty before), with
   the pool whose rendering matches their current cpuset/mems as a hint (first in the
   sort key) and their current CPUs preferred when slicing (under hide-hyperthreads,
   the CPUs shown before their hidden siblings; a mixed one reporting no isolated CPU
   stays off them, `Rebuilder._sliced_off_shared`).  A reserved container that reports the
   root pool's shared set ran beyond the reserved capacity and stays there, even when
   that capacity is free now (as it would while the daemon runs).  One that fits
   nowhere by its request (or whose annotations are malformed) still runs: it is
   *overcommitted* on the shared CPUs of the best pool with no demand counted (or on
   the reserved CPUs when no pool has a shared CPU; `Rebuilder._overcommit`), named in
   the reason, rather than left where it is, which could be on CPUs now exclusive to
   another;
3. the decision's updates are the containers whose rendering differs from what the
   runtime reports.  So after a rebuild no CPU exclusive to one container is in the
   cpuset of another (the restart rule), except for containers that opted out of
   pinning (``cpu.preserve``, ``pinCPU: false``).

Pure: a rebuild reads only its arguments and returns a `Decision`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from nri_resmgr.model import (
    AllocationError,
    AnnotationError,
    Assignment,
    ContainerID,
    ContainerInfo,
    CPUKind,
    Decision,
)
from nri_resmgr.policy.common import one_thread_per_core, order_claims
from nri_resmgr.policy.kit.rebuild import each_once, moved
from nri_resmgr.policy.topology_aware.config import ResolvedConfig
from nri_resmgr.policy.topology_aware.invariants import check_addition
from nri_resmgr.policy.topology_aware.offers import Offer, exact_offer
from nri_resmgr.policy.topology_aware.placement import Placer, as_shared, beyond_reserved
from nri_resmgr.policy.topology_aware.pools import PoolTree
from nri_resmgr.policy.topology_aware.preferences import (
    ALL_MEMORY,
    ContainerRequest,
    RequestShapes,
)
from nri_resmgr.policy.topology_aware.rendering import RenderMemo, pinned_mems, render_all
from nri_resmgr.policy.topology_aware.reports import (
    Reports,
    claim_of,
    hint_for,
    pins_cpus,
    shared_like_claims,
    unreadable_request,
)
from nri_resmgr.policy.topology_aware.state import Grant, TopologyAwareState
from nri_resmgr.topology.cpuset import CPUSet, IDSet, union
from nri_resmgr.topology.model import Topology

__all__ = ["Rebuilder"]

#: the order in which step 2 places the containers not kept, by kind (`_phase`)
_PHASE_ORDER = {
    CPUKind.EXCLUSIVE: 0,
    CPUKind.MIXED: 1,
    CPUKind.SHARED: 2,
    CPUKind.RESERVED: 3,
    CPUKind.NONE: 5,
}
#: the phase of a shared container with no CPU request: after every request (`_phase`)
_ZERO_REQUEST_PHASE = 4


def _phase(request: ContainerRequest) -> int:
    """When step 2 places a container with `request`: by its kind, but a shared one with
    no CPU request after every container with one.

    Each pool keeps 1m of its shared capacity back for the containers with no CPU
    request in its subtree (nri-plugins' ``AllocatableSharedCPU``, `offers.
    allocatable_shared`); such a container is never refused for want of room, it only
    ranks a pool with none lower.  Live, it may come after a container that took all
    of a pool's room; placed before that one at a rebuild, its 1m would refuse it (a
    reserved request beyond the reserved capacity on the root's shared CPUs, or a
    shared one).  After everyone with a request, it refuses no one the live policy
    placed, and its hint keeps it in the pool it reports.
    """
    if request.zero_cpu_request and request.kind is CPUKind.SHARED:
        return _ZERO_REQUEST_PHASE
    return _PHASE_ORDER[request.kind]


@dataclass(frozen=True, slots=True)
class _Rebuilt:
    """One pass of a rebuild: the state, its notes, and what the retry looks at."""

    state: TopologyAwareState
    notes: tuple[str, ...]
    #: the containers whose rendering differs from their report
    updates: tuple[Assignment, ...]
    #: containers that fit nowhere by their request
    overcommitted: tuple[ContainerID, ...]
    #: kept claims that are exactly a pool's shared set (`reports.shared_like_claims`) and that
    #: another container's report overlaps
    kept_shared_like: frozenset[ContainerID]

    @property
    def cost(self) -> tuple[int, int]:
        """Containers overcommitted, then containers moved: the smaller pass wins."""
        return (len(self.overcommitted), len(self.updates))


class Rebuilder:
    """The rebuild of one policy's state (module docstring), placing with `placer`."""

    def __init__(self, placer: Placer, renderings: RenderMemo | None = None) -> None:
        self.placer = placer
        #: the policy's rendering memo: the rebuilt state's rendering is the one the
        #: pipeline's commit asks the policy for next (None: `render_all`)
        self.renderings = renderings

    @property
    def topology(self) -> Topology:
        return self.placer.topology

    @property
    def tree(self) -> PoolTree:
        return self.placer.tree

    @property
    def config(self) -> ResolvedConfig:
        return self.placer.config

    def rebuild(self, containers: Sequence[ContainerInfo]) -> Decision[TopologyAwareState]:
        """The state rebuilt from `containers` and the updates that move them (module
        docstring)."""
        notes: list[str] = []
        containers = each_once(containers)
        requests: dict[ContainerID, ContainerRequest] = {}
        shapes = RequestShapes(self.config)
        for c in containers:
            try:
                requests[c.id] = shapes.of(c)
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
        requests = dict(requests)
        reports = Reports.read(self.tree, self.topology, containers, requests)
        st, kept_shared_like = self._keep_claims(reports, requests, skip=skip)
        # 2. place everyone else, hinted by where they are now
        position = {c.id: i for i, c in enumerate(containers)}
        pending = [c for c in containers if c.id not in st.grants]
        if self.config.options.fallback_to_shared:
            self._read_fallen_back(st, pending, requests, skip=skip)
        pending.sort(
            key=lambda c: (
                _phase(requests[c.id]),
                -requests[c.id].full,
                position[c.id],
            )
        )
        st, notes, overcommitted = self._place_rest(st, pending, requests, reports)
        rendered = (
            render_all(self.topology, st)
            if self.renderings is None
            else self.renderings.render_many(
                tree=self.tree, topology=self.topology, state=st, cids=st.grants
            )
        )
        return _Rebuilt(
            state=st,
            notes=tuple(notes),
            updates=moved(containers, rendered),
            overcommitted=tuple(overcommitted),
            kept_shared_like=kept_shared_like,
        )

    def _keep_claims(
        self,
        reports: Reports,
        requests: Mapping[ContainerID, ContainerRequest],
        *,
        skip: frozenset[ContainerID],
    ) -> tuple[TopologyAwareState, frozenset[ContainerID]]:
        """Step 1: the state of the valid exclusive claims kept exactly, and the kept
        claims that are a pool's shared set another pinned report overlaps.

        Of the claims valid on their own, those no other report overlaps go first, then
        those only other pinned containers' cpusets overlap, then the ones overlapping
        other claims, smaller first (`common.order_claims`); a claim is kept only while
        it stays valid next to those kept before it.  Other containers' cpusets (a shared
        one on every CPU after a fail-open, a claim of the wrong size) only order it,
        never drop it.
        """
        st = TopologyAwareState.empty(self.tree)
        containers = reports.containers
        holders = reports.holders
        claims: dict[ContainerID, CPUSet] = {}
        for c in containers.values():
            held = claim_of(
                self.tree,
                self.topology,
                c,
                requests[c.id],
                holders=holders,
                missing=reports.missing,
            )
            if held is not None and self._reclaim(st, c, requests[c.id], held) is not None:
                claims[c.id] = held
        others = [
            c.current_cpus
            for c in containers.values()
            if c.id not in claims and c.current_cpus is not None and pins_cpus(requests[c.id])
        ]
        shown = {
            cid: (containers[cid].current_cpus or IDSet())
            if requests[cid].hide_hyperthreads
            else None
            for cid in claims
        }
        # a mixed container's own CPUs are CPUs of its report in no other pinned
        # report (step 2 picks them)
        mixed = IDSet(
            cpu
            for c in containers.values()
            if requests[c.id].kind is CPUKind.MIXED and pins_cpus(requests[c.id])
            for cpu in (c.current_cpus or IDSet())
            if holders[cpu] == 1
        )
        shared_like = shared_like_claims(
            self.tree, self.topology, claims, others, shown=shown, mixed=mixed
        )
        # those another pinned container's report overlaps (a shared one next to a
        # claimant that fell back to shared shows the same CPUs; an unpinned one's
        # report, perhaps every CPU, shows nothing) are the ones that may have fallen
        # back next to it: the retry (`rebuild`) leaves them shared
        seen = union(others)
        kept_shared_like: set[ContainerID] = set()
        for cid in order_claims(claims, others=others, shared_like=shared_like):
            if cid in skip:
                continue
            grant = self._reclaim(st, containers[cid], requests[cid], claims[cid])
            if grant is not None:
                st = st.with_grant(grant)
                if cid in shared_like and not claims[cid].isdisjoint(seen):
                    kept_shared_like.add(cid)
        return st, frozenset(kept_shared_like)

    def _read_fallen_back(
        self,
        st: TopologyAwareState,
        pending: Sequence[ContainerInfo],
        requests: dict[ContainerID, ContainerRequest],
        *,
        skip: frozenset[ContainerID],
    ) -> None:
        """With ``fallbackToShared``: the `pending` exclusive containers that fell back
        to shared earlier stay shared (their entry in `requests` becomes shared).

        Such a container runs on a cpuset that is not its own whole CPUs (wrong size,
        or exactly some pool's shared set); one with no cpuset at all (created while we
        were down) is placed as new.  In the retry, the skipped claims are read as
        fallen back (`rebuild`).
        """
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
            if wrong or cur in views or c.id in skip:
                requests[c.id] = as_shared(req)

    def _place_rest(
        self,
        st: TopologyAwareState,
        pending: Sequence[ContainerInfo],
        requests: Mapping[ContainerID, ContainerRequest],
        reports: Reports,
    ) -> tuple[TopologyAwareState, list[str], list[ContainerID]]:
        """Step 2: `pending` placed in order on `st`, each hinted by where it is now;
        the state, the notes and the containers overcommitted."""
        notes: list[str] = []
        overcommitted: list[ContainerID] = []
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
                req = beyond_reserved(req)
            hint = hint_for(self.topology, st, c, req)
            prefer = self._preferred(c, req, reports)
            # one whose whole CPU was sliced off the shared set stays off the isolated
            # CPUs, which may be free now; its grant keeps the request it made
            sliced = self._sliced_off_shared(c, req)
            try:
                grant, _ = self.placer.place(
                    st,
                    c,
                    replace(req, prefer_isolated=False) if sliced else req,
                    hint=hint,
                    prefer=prefer,
                    root_only=root_only,
                )
                if sliced:
                    grant = replace(grant, request=req)
            except AllocationError as exc:
                # it runs anyway: on shared CPUs, off everyone's exclusive ones
                notes.append(f"overcommitted: {exc}")
                overcommitted.append(c.id)
                grant = self._overcommit(st, c, req, hint=hint, notes=notes)
            st = st.with_grant(grant)
        return st, notes, overcommitted

    def _preferred(self, c: ContainerInfo, req: ContainerRequest, reports: Reports) -> list[CPUSet]:
        """The CPUs `c` prefers when its grant is sliced, best first: of its current CPUs
        (and under hide-hyperthreads their siblings), those in nobody else's cpuset."""
        if not c.current_cpus:
            return [IDSet()] * 5  # the five sets below, all empty (a cold start)
        mine = union(
            self.topology.siblings(cpu) if req.hide_hyperthreads else IDSet([cpu])
            for cpu in (c.current_cpus or IDSet()) & self.tree.root.cpus
        )
        # in nobody else's cpuset (a hidden sibling counts only if no one sees it);
        # of those, the visible ones are not hidden behind another's
        # hide-hyperthreads view either (a view of one thread a core may hold the
        # whole cores), and go first
        own = (c.current_cpus or IDSet()) if pins_cpus(req) else IDSet()
        holders, hidden = reports.holders, reports.hidden
        lonely = IDSet(cpu for cpu in mine if holders[cpu] - (cpu in own) == 0)
        mine_hidden = reports.hidden_by.get(c.id, frozenset())
        visible = IDSet(cpu for cpu in lonely if hidden[cpu] - (cpu in mine_hidden) == 0)
        # a mixed container's own CPUs are the ones other shared views lack
        evidence = IDSet(cpu for cpu in lonely if reports.missing[cpu])
        # under hide-hyperthreads, a CPU shown before its hidden sibling: the
        # rendering shows the lowest thread held on each core, so a shown CPU that
        # is a higher thread is held while its lower sibling is not
        return [evidence, visible & own, visible, lonely & own, lonely]

    def _sliced_off_shared(self, c: ContainerInfo, req: ContainerRequest) -> bool:
        """Whether pinned mixed `c`, preferring (not requiring) isolated CPUs, reports
        none: its whole CPU was sliced off the shared set.

        The live policy takes isolated CPUs only while enough are free, else slices the
        shared set (nri-plugins' ``supply.pickExclusiveCPUs``: ``cr.isolate &&
        cs.isolated.Size() >= cnt``).  A report with no isolated CPU is that second way,
        taken when the isolated CPUs were held; placed as new once they are free again,
        it would move onto them without cause.
        """
        cur = c.current_cpus
        return (
            req.kind is CPUKind.MIXED
            and req.prefer_isolated
            and not req.require_isolated
            and pins_cpus(req)
            and cur is not None
            and bool(cur)
            and cur <= self.tree.root.cpus
            and cur.isdisjoint(self.tree.root.isolated)
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
        if not c.current_cpus or req.kind not in (CPUKind.SHARED, CPUKind.MIXED):
            return None  # (a cold start's containers report no CPUs)
        view = c.current_cpus & self.tree.root.cpus
        if not pins_cpus(req) or not view:
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
            grant, _ = self.placer.place(state, c, loose, hint=hint, prefer=())
        except AllocationError as exc:
            notes.append(f"on the reserved CPUs: {exc}")
            reserved = replace(loose, kind=CPUKind.RESERVED, pin_memory=False)
            grant, _ = self.placer.place(state, c, reserved, hint=None, prefer=())
        return grant

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
        kind = CPUKind.ISOLATED if isolated else CPUKind.EXCLUSIVE
        if req.pin_memory and c.current_mems is not None:
            matching = [
                i
                for i in pools
                if pinned_mems(self.tree, self.topology, self.tree.pools[i], kind, req)
                == c.current_mems
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
                kind=kind,
                cpus=cur,
            )
            if isinstance(offer, Offer) and not self.check_addition(state, offer.grant):
                return offer.grant
        return None

    def check_addition(self, state: TopologyAwareState, grant: Grant) -> tuple[str, ...]:
        """What `state` plus `grant` breaks of the invariants; `state` must keep them.

        Rebuild's first step starts from the empty state and adds a grant only once this
        finds nothing, so the precondition holds there; the check then costs O(pools),
        not O(containers kept so far) (`invariants.check_addition`).
        """
        return check_addition(self.topology, state, grant)
