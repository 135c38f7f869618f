"""Why a pool won: every candidate pool of a placement with its sort key, and why it lost.

Theory of operation: `rank_pools(policy, state, container)` reads the container's request
and hints as `TopologyAwarePolicy.allocate` does and asks the policy's placement for its
ranking with every candidate's offer (`placement.Placer.rank` with ``every=True``; the
policy itself stops once no remaining pool's bound can beat the best offer): the winner
is the same, and every loser is named with the first component of the key on which it
lost (`COMPONENTS`), or with the reason it could make no offer.

It explains the choice among pools; a request no pool fits then goes where
`fallbackToShared` or the reserved overflow sends it, which the decision's own reason
says.  Pure; costs one offer per pool (the policy's pruning is not applied), so it is for
a person's question, not for the event path.  `tests/unit/resmgr/view/test_explain.py`
checks on every container of the shipped scenarios that the winner here is the pool
the policy chose.
"""

from __future__ import annotations

from dataclasses import dataclass

from nri_resmgr.model import ContainerInfo
from nri_resmgr.policy.topology_aware.hints import container_hints, hinted_pool, pick_preference
from nri_resmgr.policy.topology_aware.policy import TopologyAwarePolicy
from nri_resmgr.policy.topology_aware.preferences import container_request
from nri_resmgr.policy.topology_aware.scoring import KEY_COMPONENTS, OfferKey
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
    ranking = policy.placer.rank(
        state, container, request, hint=hint, prefer=pick_preference(hints), every=True
    )
    best = ranking.scored[0].key if ranking.scored else None
    offers = tuple(
        Candidate(
            s.offer.pool.name,
            s.key,
            str(s.offer.grant.exclusive),
            _lost(s.key, best) if best else "",
        )
        for s in ranking.scored
    )
    failed = tuple(
        Candidate(pool.name, None, "", f"no offer: {reason}") for pool, reason in ranking.failed
    )
    return Ranking(
        request=request.describe(),
        kind=str(request.kind),
        hinted_pool=tree.pools[hint].name if hint is not None else "",
        candidates=offers + failed,
    )
