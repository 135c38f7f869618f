"""Where a request goes: the candidate pools, their ranked offers, and the fallbacks.

Theory of operation: `Placer` holds what placement reads and never changes (the machine,
the pool tree, the resolved configuration, nri-plugins' CPU allocator on this machine and
the CPU priority classes).  `Placer.rank` asks the candidate pools of a request for their
offers against one immutable state (`offers.make_offer`) and returns the `Ranking`: every
offer made with its sort key (`scoring.offer_key`), best first, and the reason of each
pool that could make none.  Offers are built in the order of the best key each pool could
reach (`scoring.key_bounds`), and no more are built once none of the remaining pools can
win: same winner, usually one offer instead of one per pool.  The key of an offer that
takes no CPUs (shared, reserved, unpinned) is its bound, which is exact for those; only
whole-CPU offers are keyed again.  With ``every=True`` every candidate makes its offer
(`explain.rank_pools` shows them all to a person).

`Placer.place` takes the ranking's winner.  When no pool fits, `Placer.fall_back`
decides where the request goes instead: an exclusive one with ``fallbackToShared`` is
retried as shared anywhere; a reserved one beyond the reserved capacity
(``reservedResources.cpu``) runs on the root pool's shared CPUs, as in nri-plugins;
anything else is an `AllocationError` naming the container, the request and each pool's
reason.  Mixed requests do not fall back: a mixed cpuset (own CPUs plus a shared set)
could not be told apart from a shared one at rebuild.

Pure: every method takes the state it reads and returns a grant; nothing is kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Self

from nri_resmgr.model import AllocationError, ContainerInfo, CPUKind
from nri_resmgr.policy.cpu_allocator import CPUAllocator
from nri_resmgr.policy.topology_aware.config import ResolvedConfig
from nri_resmgr.policy.topology_aware.offers import (
    Offer,
    allocatable_by_pool,
    burst_key,
    is_burst_ranked,
    make_offer,
)
from nri_resmgr.policy.topology_aware.pools import Pool, PoolTree
from nri_resmgr.policy.topology_aware.preferences import ContainerRequest
from nri_resmgr.policy.topology_aware.priority import PriorityCPUs, priority_cpus
from nri_resmgr.policy.topology_aware.scoring import (
    OfferKey,
    affinity_by_pool,
    key_bounds,
    offer_key,
)
from nri_resmgr.policy.topology_aware.state import Grant, TopologyAwareState
from nri_resmgr.topology.cpuset import CPUSet
from nri_resmgr.topology.model import Topology

__all__ = ["Placer", "Ranking", "Scored", "as_shared", "beyond_reserved"]

#: the kinds of request whose offer takes no CPUs: its key is its pool's key bound
_TAKES_NO_CPUS = frozenset({CPUKind.SHARED, CPUKind.RESERVED, CPUKind.NONE})


def as_shared(request: ContainerRequest) -> ContainerRequest:
    """`request` with its whole CPUs turned into shared millicores (fallbackToShared)."""
    return replace(
        request,
        kind=CPUKind.SHARED,
        full=0,
        shared_milli=1000 * request.full + request.shared_milli,
        prefer_isolated=False,
    )


def beyond_reserved(request: ContainerRequest) -> ContainerRequest:
    """A reserved `request` as it runs beyond the reserved capacity: shared (in the root
    pool, `Placer.fall_back`)."""
    return replace(request, kind=CPUKind.SHARED)


@dataclass(frozen=True, slots=True)
class Scored:
    """One pool's offer with its sort key."""

    key: OfferKey
    offer: Offer


@dataclass(frozen=True, slots=True)
class Ranking:
    """The offers of one placement, best first, and why the other pools made none."""

    scored: tuple[Scored, ...]
    #: each candidate that could make no offer and its reason, in pool order
    failed: tuple[tuple[Pool, str], ...]

    @property
    def best(self) -> Offer | None:
        return self.scored[0].offer if self.scored else None


@dataclass(frozen=True, slots=True)
class Placer:
    """Placement on one machine and configuration (module docstring)."""

    topology: Topology
    tree: PoolTree
    config: ResolvedConfig
    #: nri-plugins' CPU allocator on this machine: which CPUs each grant takes
    allocator: CPUAllocator
    priorities: PriorityCPUs

    @classmethod
    def build(cls, topology: Topology, tree: PoolTree, config: ResolvedConfig) -> Self:
        """The placement of `tree` on `topology`, with the machine's CPU priority classes
        (`priority.priority_cpus`) and the allocator that ranks by them."""
        priorities = priority_cpus(topology)
        allocator = CPUAllocator(
            topology,
            high=priorities.high,
            normal=priorities.normal,
            low=priorities.low,
            hybrid=priorities.hybrid,
        )
        return cls(
            topology=topology,
            tree=tree,
            config=config,
            allocator=allocator,
            priorities=priorities,
        )

    def candidates(self, request: ContainerRequest, *, root_only: bool = False) -> list[Pool]:
        """The pools that may serve `request`: the reserved pool for a reserved one, the
        root for one that is not pinned (or that must run in the root), else every pool."""
        if root_only or request.kind is CPUKind.NONE:
            return [self.tree.root]
        if request.kind is CPUKind.RESERVED:
            return [self.tree.pools[self.tree.reserved_pool]]
        return list(self.tree.pools)

    def rank(
        self,
        state: TopologyAwareState,
        container: ContainerInfo,
        request: ContainerRequest,
        *,
        hint: int | None,
        prefer: Sequence[CPUSet],
        root_only: bool = False,
        every: bool = False,
    ) -> Ranking:
        """The candidates' offers for `container` in `state`, best first (module
        docstring); with `every`, no pool's offer is skipped."""
        supply = state.supply
        affinities = affinity_by_pool(state, self.tree, container_id=container.id, request=request)
        # the Burstable components, once per pool (offers.burst_key)
        candidates = self.candidates(request, root_only=root_only)
        bursts = {pool.index: (0, 0) for pool in candidates}
        rooms = allocatable_by_pool(self.tree, supply)
        if is_burst_ranked(request):
            for pool in candidates:
                bursts[pool.index] = burst_key(
                    self.tree, supply, pool, request, room=rooms[pool.index]
                )
        # offers in the order of the best key each pool could reach; once the best offer
        # so far beats the bound of the next pool it beats all the rest (scoring.key_bound)
        bounded = key_bounds(
            candidates,
            tree=self.tree,
            supply=supply,
            request=request,
            hint=hint,
            affinities=affinities,
            rooms=rooms,
            priorities=self.priorities,
            bursts=bursts,
        )
        scored: list[Scored] = []
        failed: list[tuple[Pool, str]] = []
        best_key: OfferKey | None = None
        for bound, pool in bounded:
            if not every and best_key is not None and bound > best_key:
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
                # an offer that takes no CPUs has the key its bound is (every component of
                # `scoring.key_bound` is exact but the isolated preference, which only a
                # whole-CPU request has): most of a Synchronize's placements
                key = (
                    bound
                    if request.kind in _TAKES_NO_CPUS
                    else offer_key(
                        got,
                        hinted=pool.index == hint,
                        affinity_score=affinities.get(pool.index, 0),
                        tree=self.tree,
                    )
                )
                scored.append(Scored(key, got))
                best_key = key if best_key is None else min(best_key, key)
            else:
                failed.append((pool, got))
        # (keys end with the pool index: no two are equal)
        return Ranking(
            scored=tuple(sorted(scored, key=lambda s: s.key)),
            failed=tuple(sorted(failed, key=lambda pr: pr[0].index)),
        )

    def place(
        self,
        state: TopologyAwareState,
        container: ContainerInfo,
        request: ContainerRequest,
        *,
        hint: int | None,
        prefer: Sequence[CPUSet],
        root_only: bool = False,
    ) -> tuple[Grant, str]:
        """The grant of the best offer for `container` and the decision's reason, or where
        `fall_back` sends a request no pool fits."""
        ranking = self.rank(
            state, container, request, hint=hint, prefer=prefer, root_only=root_only
        )
        best = ranking.best
        if best is not None:
            return best.grant, f"{best.grant.kind} in {best.pool.name}"
        reasons = [f"{pool.name}: {reason}" for pool, reason in ranking.failed]
        message = f"{container.pretty}: no pool can fit {request.describe()}; " + "; ".join(reasons)
        return self.fall_back(state, container, request, message, hint=hint, prefer=prefer)

    def fall_back(
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
            shared = as_shared(request)
            grant, where = self.place(state, container, shared, hint=hint, prefer=prefer)
            return grant, f"{where} (fallbackToShared: {message})"
        if request.kind is CPUKind.RESERVED:
            grant, where = self.place(
                state,
                container,
                beyond_reserved(request),
                hint=hint,
                prefer=prefer,
                root_only=True,
            )
            return grant, f"{where} (reserved capacity exceeded: {message})"
        raise AllocationError(message)
