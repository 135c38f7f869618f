"""Why a pool won: every candidate pool of a placement with its sort key, and why it lost.

Theory of operation: `rank_pools(policy, state, container)` takes the same steps as
`TopologyAwarePolicy.allocate` up to the choice (the container's request and hints, the
candidate pools, the affinity and Burstable components of each) and then asks *every*
candidate for its offer (`offers.make_offer`) and its key (`scoring.offer_key`), where
the policy stops once no remaining pool's bound can beat the best offer (`key_bound`):
the winner is the same, and every loser is named with the first component of the key
on which it lost (`COMPONENTS`), or with the reason it could make no offer.

It explains the choice among pools; a request no pool fits then goes where
`fallbackToShared` or the reserved overflow sends it, which the decision's own reason
says.  Pure; costs one offer per pool (the policy's pruning is not applied), so it is for
a person's question, not for the event path.  `tests/unit/resmgr/view/test_explain.py`
checks on every container of the shipped scenarios that the winner here is the pool
the policy chose.
"""

from __future__ import annotations

from dataclasses import dataclass

from nri_resmgr.model import ContainerInfo, CPUKind
from nri_resmgr.policy.topology_aware.hints import container_hints, hinted_pool, pick_preference
from nri_resmgr.policy.topology_aware.offers import (
    Offer,
    allocatable_by_pool,
    burst_key,
    is_burst_ranked,
    make_offer,
)
from nri_resmgr.policy.topology_aware.policy import TopologyAwarePolicy
from nri_resmgr.policy.topology_aware.pools import Pool
from nri_resmgr.policy.topology_aware.preferences import ContainerRequest, container_request
from nri_resmgr.policy.topology_aware.scoring import (
    KEY_COMPONENTS,
    OfferKey,
    affinity_by_pool,
    offer_key,
)
from nri_resmgr.policy.topology_aware.state import TopologyAwareState

__all__ = ["COMPONENTS", "Candidate", "Ranking", "rank_pools"]

#: the names of `scoring.offer_key`'s components, in order
COMPONENTS = KEY_COMPONENTS


@dataclass(frozen=True, slots=True)
class Candidate:
    """One candidate pool: its key (None when it could make no offer) and verdict."""

    pool: str
    key: OfferKey | None
    #: the CPUs the offer would hold exclusively ("" for a shared offer or none)
    cpus: str
    #: ``winner``, ``lost on COMPONENT: its value vs the winner's``, or ``no offer: why``
    verdict: str


@dataclass(frozen=True, slots=True)
class Ranking:
    """The request as the policy read it and every candidate, best first."""

    request: str
    kind: str
    hinted_pool: str
    candidates: tuple[Candidate, ...]

    @property
    def winner(self) -> Candidate | None:
        return self.candidates[0] if self.candidates and self.candidates[0].key else None


def _candidates(policy: TopologyAwarePolicy, request: ContainerRequest) -> list[Pool]:
    """The pools `TopologyAwarePolicy.allocate` considers (its ``_candidates``)."""
    tree = policy.tree
    if request.kind is CPUKind.RESERVED:
        return [tree.pools[tree.reserved_pool]]
    if request.kind is CPUKind.NONE:
        return [tree.root]
    return list(tree.pools)


def _lost(key: OfferKey, best: OfferKey) -> str:
    for name, mine, theirs in zip(COMPONENTS, key, best, strict=True):
        if mine != theirs:
            return f"lost on {name}: {mine} vs {theirs}"
    return "winner"


def rank_pools(
    policy: TopologyAwarePolicy, state: TopologyAwareState, container: ContainerInfo
) -> Ranking:
    """Every candidate pool for `container` in `state` (module docstring)."""
    tree = policy.tree
    request = container_request(container, policy.config)
    hints = container_hints(container, policy.topology)
    hint = hinted_pool(tree, hints)
    prefer = pick_preference(hints)
    supply = state.supply
    affinities = affinity_by_pool(state, tree, container_id=container.id, request=request)
    pools = _candidates(policy, request)
    rooms = allocatable_by_pool(tree, supply)
    room = rooms if is_burst_ranked(request) else None
    ranked: list[tuple[OfferKey, Offer]] = []
    failed: list[Candidate] = []
    for pool in pools:
        burst = (
            burst_key(tree, supply, pool, request, room=room[pool.index])
            if room is not None
            else (0, 0)
        )
        got = make_offer(
            tree=tree,
            topology=policy.topology,
            allocator=policy.allocator,
            supply=supply,
            pool=pool,
            container_id=container.id,
            pod_id=container.pod.id,
            namespace=container.namespace,
            request=request,
            prefer=prefer,
            priorities=policy.priorities,
            burst=burst,
            rooms=rooms,
        )
        if isinstance(got, Offer):
            key = offer_key(
                got,
                hinted=pool.index == hint,
                affinity_score=affinities.get(pool.index, 0),
                tree=tree,
            )
            ranked.append((key, got))
        else:
            failed.append(Candidate(pool.name, None, "", f"no offer: {got}"))
    ranked.sort(key=lambda ko: ko[0])
    best = ranked[0][0] if ranked else None
    offers = tuple(
        Candidate(o.pool.name, k, str(o.grant.exclusive), _lost(k, best) if best else "")
        for k, o in ranked
    )
    return Ranking(
        request=request.describe(),
        kind=str(request.kind),
        hinted_pool=tree.pools[hint].name if hint is not None else "",
        candidates=offers + tuple(failed),
    )
