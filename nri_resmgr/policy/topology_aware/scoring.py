"""Choosing among offers: one documented sort key instead of a comparison chain.

Theory of operation: every pool that *can* serve a request makes an `Offer`
(`offers.make_offer`); pools that cannot are filtered out before sorting (that is the
"fits" component of the key: failing pools never compete).  The remaining offers are
sorted by `offer_key`, a tuple compared left to right, smallest first:

=====  ====================  =============================================================
 #     component             meaning (smaller wins)
=====  ====================  =============================================================
 1     ``not hinted``        0 for the pool the container is in now (rebuild, update):
                             a valid placement is kept rather than moved
 2     ``not preference``    0 when the offer meets the container's isolated-CPU
                             preference (an isolated offer beats a sliced one)
 3     ``-affinity``         more of the pod's containers (``colocatePods``) and of its
                             namespace (``colocateNamespaces``) already in this pool
 3b    ``burst``             Burstable containers (`offers.burst_key`): with a CPU limit,
                             pools with room for it first; without one, pools at the
                             ``unlimitedBurstable`` level first, the roomiest of them
 4     ``-depth``            deeper pools first: the tightest pool that fits (a NUMA
                             node or L3 group before its package, before the machine)
 5     ``crowding``          shared requests: fewer containers already in the pool,
                             so that shared containers spread over the leaves
                             (0 for exclusive, isolated and reserved requests)
 6     ``-headroom``         more capacity left after the grant: free shared millicores
                             (exclusive, mixed, shared) or free isolated CPUs (isolated)
 7     ``pool index``        breadth-first pool number: deterministic final tie-break
=====  ====================  =============================================================

`key_bound` is the smallest key an offer of a pool could possibly get, computed from the
supply alone (no CPUs are picked): `_place` builds offers in the order of these bounds and
stops once the best offer found beats the bound of every pool left, which gives the same
winner as building every offer (keys end with the pool index, so no two are equal) while
an exclusive request usually picks CPUs in one pool instead of all of them.

Compared with nri-plugins' ``compareScores`` the order is the same in spirit
(affinity, then Burstable limits, then tree depth, then per-kind capacity, then id)
without topology hints or CPU priorities.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from nri_resmgr.model import CPUKind, PodID
from nri_resmgr.policy.topology_aware.offers import Offer
from nri_resmgr.policy.topology_aware.pools import Pool
from nri_resmgr.policy.topology_aware.preferences import ContainerRequest
from nri_resmgr.policy.topology_aware.state import Supply, TopologyAwareState

__all__ = ["OfferKey", "affinity", "affinity_by_pool", "best_offer", "key_bound", "offer_key"]

OfferKey = tuple[int, int, int, int, int, int, int, int, int]


def affinity(
    state: TopologyAwareState,
    pool: int,
    *,
    pod_id: PodID,
    namespace: str,
    colocate_pods: bool,
    colocate_namespaces: bool,
) -> int:
    """How many containers of the same pod / namespace live in exactly `pool`."""
    score = 0
    for g in state.grants.values():
        if g.pool != pool:
            continue
        if colocate_pods and g.pod_id == pod_id:
            score += 1
        if colocate_namespaces and g.namespace == namespace:
            score += 1
    return score


def affinity_by_pool(
    state: TopologyAwareState,
    pools: int,
    *,
    pod_id: PodID,
    namespace: str,
    colocate_pods: bool,
    colocate_namespaces: bool,
) -> dict[int, int]:
    """`affinity` of every pool (0 .. pools-1), in one pass over the grants."""
    out = dict.fromkeys(range(pools), 0)
    if not (colocate_pods or colocate_namespaces):
        return out
    for g in state.grants.values():
        if colocate_pods and g.pod_id == pod_id:
            out[g.pool] += 1
        if colocate_namespaces and g.namespace == namespace:
            out[g.pool] += 1
    return out


def offer_key(offer: Offer, *, hinted: bool, affinity_score: int) -> OfferKey:
    """The sort key of one offer (see the module docstring)."""
    crowding = offer.population if offer.grant.kind is CPUKind.SHARED else 0
    return (
        0 if hinted else 1,
        0 if offer.preference_met else 1,
        -affinity_score,
        *offer.burst,
        -offer.pool.depth,
        crowding,
        -offer.headroom,
        offer.pool.index,
    )


def key_bound(
    pool: Pool,
    *,
    supply: Supply,
    request: ContainerRequest,
    hinted: bool,
    affinity_score: int,
    burst: tuple[int, int] = (0, 0),
) -> OfferKey:
    """A lower bound of `offer_key` for any offer `pool` can make `request` (module doc).

    `burst` is `offers.burst_key` of the pool (exact: it reads the supply only).
    Every component is exact except two, for whole-CPU requests.  The isolated
    preference counts as met unless it cannot be: an isolated offer needs at least
    `request.full` free isolated CPUs (and, for a mixed request, some shared CPUs), and
    a sliced offer meets it only when there is no preference.  The headroom is its largest
    possible value, since an offer takes at least `request.full` CPUs, from the shared set
    or from the free isolated CPUs (`offers.make_offer`).
    """
    i = pool.index
    shared = 1000 * len(supply.shared[i]) - supply.demand[i] - request.shared_milli
    crowding = 0
    unmet = 0
    if request.kind in (CPUKind.NONE, CPUKind.RESERVED):
        headroom = 0
    elif request.kind is CPUKind.SHARED:
        headroom = shared
        crowding = supply.population[i]
    else:
        headroom = shared - 1000 * request.full
        if request.prefer_isolated:
            free_iso = len(pool.isolated) - len(pool.isolated & supply.used)
            mixed = request.shared_milli > 0
            if free_iso >= request.full and (supply.shared[i] or not mixed):
                headroom = max(headroom, 1000 * (free_iso - request.full))
            else:
                unmet = 1
    return (
        0 if hinted else 1,
        unmet,
        -affinity_score,
        *burst,
        -pool.depth,
        crowding,
        -headroom,
        i,
    )


def best_offer(
    offers: Iterable[Offer], *, hint: int | None, affinities: Mapping[int, int]
) -> Offer | None:
    """The offer with the smallest key, or None when there are none."""
    ranked = sorted(
        offers,
        key=lambda o: offer_key(
            o, hinted=o.pool.index == hint, affinity_score=affinities.get(o.pool.index, 0)
        ),
    )
    return ranked[0] if ranked else None
