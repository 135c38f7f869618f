"""Choosing among offers: one documented sort key instead of a comparison chain.

Theory of operation: every pool that *can* serve a request makes an `Offer`
(`offers.make_offer`); pools that cannot are filtered out before sorting (that is the
"fits" component of the key: failing pools never compete).  The remaining offers are
sorted by `offer_key`, a tuple compared left to right, smallest first:

=====  ====================  =============================================================
 #     component             meaning (smaller wins)
=====  ====================  =============================================================
 1     ``not hinted``        0 for the pool the container is in now (rebuild, update):
                             a valid placement is kept rather than moved; for a new
                             container, the deepest pool covering its topology hints
                             (`hints.hinted_pool`: its devices' and mounts' locality)
 2     ``not preference``    0 when the offer meets the container's isolated-CPU
                             preference (an isolated offer beats a sliced one)
 3     ``-affinity``         higher affinity score (`affinity`): the weights of the
                             container's ``affinity``/``anti-affinity`` rules (else the
                             implicit ``colocatePods``/``colocateNamespaces`` ones, 10
                             each) towards the containers of this pool, its ancestors
                             and its subtree, diluted by 0.75 per tree link
 4     ``priority unmet``    ``prefer-cpu-priority`` high or low: 1 when the pool's free
                             shared CPUs of that class cannot hold the request
                             (`priority.priority_unmet`; nri-plugins ranks this after
                             affinity and before depth); 0 otherwise
 5     ``burst``             Burstable containers (`offers.burst_key`, two components):
                             with a CPU limit, pools with room for it first; without one,
                             pools at the ``unlimitedBurstable`` level first, the roomiest
 6     ``-depth``            deeper pools first: the tightest pool that fits (a NUMA
                             node or L3 group before its package, before the machine)
 7     ``normal unmet``      the same for ``prefer-cpu-priority: normal``, which
                             nri-plugins ranks after depth; 0 otherwise
 8     ``crowding``          shared requests: fewer containers already in the pool,
                             so that shared containers spread over the leaves
                             (0 for exclusive, isolated and reserved requests)
 9     ``-headroom``         more capacity left after the grant: free shared millicores
                             (exclusive, mixed, shared) or free isolated CPUs (isolated)
10     ``pool index``        breadth-first pool number: deterministic final tie-break
=====  ====================  =============================================================

`key_bound` is the smallest key an offer of a pool could possibly get, computed from the
supply alone (no CPUs are picked): `_place` builds offers in the order of these bounds and
stops once the best offer found beats the bound of every pool left, which gives the same
winner as building every offer (keys end with the pool index, so no two are equal) while
an exclusive request usually picks CPUs in one pool instead of all of them.

Compared with nri-plugins' ``compareScores`` the order is the same in spirit
(affinity, then CPU priority, then Burstable limits, then tree depth, then per-kind
capacity, then id); its topology hints are the first component here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from nri_resmgr.model import ContainerID, CPUKind
from nri_resmgr.policy.topology_aware.affinity import diluted_scores, pool_weights
from nri_resmgr.policy.topology_aware.offers import Offer
from nri_resmgr.policy.topology_aware.pools import Pool, PoolTree
from nri_resmgr.policy.topology_aware.preferences import ContainerRequest
from nri_resmgr.policy.topology_aware.priority import CPUPriority, PriorityCPUs, priority_unmet
from nri_resmgr.policy.topology_aware.state import Supply, TopologyAwareState

__all__ = ["OfferKey", "affinity_by_pool", "best_offer", "key_bound", "offer_key"]

OfferKey = tuple[int, int, float, int, int, int, int, int, int, int, int]


def _priority_terms(priority: CPUPriority, unmet: bool) -> tuple[int, int]:
    """Components 4 and 6 of the key: (high/low unmet, normal unmet)."""
    if not unmet:
        return 0, 0
    return (0, 1) if priority is CPUPriority.NORMAL else (1, 0)


def affinity_by_pool(
    state: TopologyAwareState,
    tree: PoolTree,
    *,
    container_id: ContainerID,
    request: ContainerRequest,
) -> dict[int, float]:
    """The affinity score of every pool with a non-zero one (`affinity.diluted_scores`).

    The request's rules (``affinity``/``anti-affinity`` annotations, or the implicit
    ``colocatePods``/``colocateNamespaces`` ones) are weighed against every other
    container in `state`, in the pool it lives in.
    """
    if not request.affinities:
        return {}
    weights = pool_weights(
        request.affinities,
        ((g.container_id, g.pool, g.request.subject) for g in state.grants.values()),
        self_id=container_id,
    )
    return diluted_scores(tree, weights)


def offer_key(offer: Offer, *, hinted: bool, affinity_score: float) -> OfferKey:
    """The sort key of one offer (see the module docstring)."""
    crowding = offer.population if offer.grant.kind is CPUKind.SHARED else 0
    prio, normal = _priority_terms(offer.grant.request.cpu_priority, offer.priority_unmet)
    return (
        0 if hinted else 1,
        0 if offer.preference_met else 1,
        -affinity_score,
        prio,
        *offer.burst,
        -offer.pool.depth,
        normal,
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
    affinity_score: float,
    priorities: PriorityCPUs | None = None,
    burst: tuple[int, int] = (0, 0),
) -> OfferKey:
    """A lower bound of `offer_key` for any offer `pool` can make `request` (module doc).

    `burst` is `offers.burst_key` of the pool (exact: it reads the supply only).
    Every component is exact except two, for whole-CPU requests.  The isolated
    preference counts as met unless it cannot be: an isolated offer needs at least
    `request.full` free isolated CPUs (and, for a mixed request, some shared CPUs), and
    a sliced offer meets it only when there is no preference.  The headroom is its largest
    possible value, since an offer takes at least `request.full` CPUs, from the shared set
    or from the free isolated CPUs (`offers.make_offer`).  The priority components are
    exact: they depend on the supply only (`priorities` as given to `make_offer`).
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
    miss = False
    if priorities is not None:
        miss = priority_unmet(
            request.cpu_priority,
            priorities,
            supply.shared[i],
            full=request.full,
            milli=request.shared_milli,
        )
    prio, normal = _priority_terms(request.cpu_priority, miss)
    return (
        0 if hinted else 1,
        unmet,
        -affinity_score,
        prio,
        *burst,
        -pool.depth,
        normal,
        crowding,
        -headroom,
        i,
    )


def best_offer(
    offers: Iterable[Offer], *, hint: int | None, affinities: Mapping[int, float]
) -> Offer | None:
    """The offer with the smallest key, or None when there are none."""
    ranked = sorted(
        offers,
        key=lambda o: offer_key(
            o, hinted=o.pool.index == hint, affinity_score=affinities.get(o.pool.index, 0)
        ),
    )
    return ranked[0] if ranked else None
