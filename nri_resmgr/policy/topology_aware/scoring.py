"""Choosing among offers: one documented sort key instead of a comparison chain.

Theory of operation: every pool that *can* serve a request makes an `Offer`
(`offers.make_offer`); pools that cannot are filtered out before sorting (that is the
"fits" component of the key: failing pools never compete).  The remaining offers are
sorted by `offer_key`, a tuple compared left to right, smallest first.  It is
nri-plugins' ``compareScores`` (pools.go) written as one key, its rules in its order:

=====  ====================  =============================================================
 #     component             meaning (smaller wins)
=====  ====================  =============================================================
 1     ``not hinted``        0 for the pool the container is in now (rebuild, update):
                             a valid placement is kept rather than moved; for a new
                             container, the deepest pool covering its topology hints
                             (`hints.hinted_pool`: its devices' and mounts' locality)
 2     ``short``             1 when the pool has too little isolated or shared capacity
                             for the request (`offers.Capacity.short`: their "a node with
                             insufficient isolated or shared capacity loses"); a
                             BestEffort container needs 1m of room, so it avoids a pool
                             whose shared capacity is all requested
 3     ``not preference``    0 when the offer meets the container's isolated-CPU
                             preference (an isolated offer beats a sliced one)
 4     ``-affinity``         higher affinity score (`affinity`): the weights of the
                             container's ``affinity``/``anti-affinity`` rules (else the
                             implicit ``colocatePods``/``colocateNamespaces`` ones, 10
                             each) towards the containers of this pool, its ancestors
                             and its subtree, diluted by 0.75 per tree link
 5     ``memory burst``      Burstable containers (`memory_key`): with a memory limit, 1
                             when the pool's memory of its kinds is below the limit;
                             without one, minus that memory, so the roomiest pool (the
                             root) wins: their "memory offer burstability"
 6-7   ``burst``             Burstable containers' CPU (`offers.burst_key`): with a CPU
                             limit, pools with room for it first; without one, pools at
                             the ``unlimitedBurstable`` level first, the roomiest; and
                             then (no CPU limit) the components after it are 0, so the
                             pool id decides: their ``compareScores`` returns the
                             lower id there, before memory span, kinds and depth
 8     ``memory span``       fewer memory nodes first: their "tighter memory offer", the
                             nodes a container gets (`pools.Pool.offer_mems_of`: a kind
                             the pool lacks adds its nearest nodes, as their memory
                             allocator widens the offer, so their "offer type match"
                             rule rarely decides)
 9     ``kinds missing``     1 when the pool lacks a memory kind the container may use
                             that the machine has: their "matching memory type wins"
                             (a NUMA node with PMEM attached beats one without)
 10    ``priority unmet``    ``prefer-cpu-priority`` high or low: 1 when the pool's free
                             shared CPUs of that class cannot hold the request
                             (`priority.priority_unmet`); 0 otherwise
 11    ``-depth``            deeper pools first: the tightest pool that fits (a NUMA
                             node or L3 group before its package, before the machine)
 12    ``-isolated``         isolated requests: more free isolated CPUs left first, when
                             the pool keeps some; the components after it are then 0
                             (theirs decides by id next)
 13    ``normal unmet``      the same as 10 for ``prefer-cpu-priority: normal``, which
                             nri-plugins ranks after depth; 0 otherwise
 14    ``-sliceable``        whole-CPU requests: more shared room left first, when the
                             pool keeps some; the components after it are then 0
 15    ``crowding``          fewer containers living in the pool (on shared or exclusive
                             CPUs), so that shared containers spread over the leaves
 16    ``-shared``           more shared room left after the grant
 17    ``pool index``        nri-plugins' pool id (`pools.Pool.their_id`, post-order:
                             a pool after its children): the final tie-break; among
                             pools of one depth the same order as the breadth-first one
=====  ====================  =============================================================

`key_bound` is the smallest key an offer of a pool could possibly get, computed from the
supply alone (no CPUs are picked): `placement.Placer.rank` builds offers in the order of
these bounds and stops once the best offer found beats the bound of every pool left, which
gives the same winner as building every offer (keys end with the pool index, so no two are
equal) while an exclusive request usually picks CPUs in one pool instead of all of them.
`key_bounds` is `key_bound` of every candidate at once, what depends on the request alone
worked out once per decision instead of once per pool (a shared decision's bounds were
its largest cost: tests/unit/resmgr/topology_aware/test_fast_paths.py holds them equal).

Kept apart from ``compareScores`` on purpose (docs/policies.md, "Differences from
nri-plugins"): the hinted pool goes first (component 1: the restart rule keeps a valid
placement where it is, and a container goes next to its devices whenever it fits), and
the isolated preference is its own component (3).  Their rules for CPU classes and the
reserved capacity per colocated container have no component: a CPU class does not
steer the pool here, and reserved containers have one pool.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from immutables import Map

from nri_resmgr.model import ContainerID, CPUKind
from nri_resmgr.policy.topology_aware.affinity import diluted_scores, pool_weights
from nri_resmgr.policy.topology_aware.offers import Capacity, Offer, capacity, is_unlimited_burst
from nri_resmgr.policy.topology_aware.pools import Pool, PoolTree
from nri_resmgr.policy.topology_aware.preferences import ContainerRequest
from nri_resmgr.policy.topology_aware.priority import CPUPriority, PriorityCPUs, priority_unmet
from nri_resmgr.policy.topology_aware.state import Supply, TopologyAwareState

__all__ = [
    "KEY_COMPONENTS",
    "OfferKey",
    "affinity_by_pool",
    "best_offer",
    "key_bound",
    "key_bounds",
    "memory_key",
    "offer_key",
]

OfferKey = tuple[
    int, int, int, float, int, int, int, int, int, int, int, int, int, int, int, int, int
]

#: the names of `OfferKey`'s components, in order (the table of the module docstring);
#: `explain` names the component on which a candidate lost by these
KEY_COMPONENTS = (
    "not hinted",
    "short",
    "not preference",
    "-affinity",
    "memory burst",
    "burst: no room for the limit",
    "burst: level and room",
    "memory span",
    "kinds missing",
    "priority unmet",
    "-depth",
    "-isolated",
    "normal unmet",
    "-sliceable",
    "crowding",
    "-shared",
    "pool index",
)


def _priority_terms(priority: CPUPriority, unmet: bool) -> tuple[int, int]:
    """Components 10 and 13 of the key: (high/low unmet, normal unmet)."""
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
    grants = state.grants
    candidates = affinity_candidates(state, request)
    others = grants.values() if candidates is None else (grants[c] for c in candidates)
    weights = pool_weights(
        request.affinities,
        ((g.container_id, g.pool, g.request.subject) for g in others),
        self_id=container_id,
    )
    return diluted_scores(tree, weights)


def affinity_candidates(
    state: TopologyAwareState, request: ContainerRequest
) -> set[ContainerID] | None:
    """The containers some rule of `request` can weigh, from the supply's subject index:
    per rule, those under the scope's or the match's index entries, whichever are fewer;
    None when a rule is one the index cannot answer (then every container is weighed).
    A container outside this set gets weight 0 from every rule."""
    subjects = state.supply.subjects
    out: set[ContainerID] = set()
    for rule in request.affinities:
        found = [
            [subjects.get(term, _NOBODY) for term in terms]
            for terms in (rule.scope.lookup_terms(), rule.match.lookup_terms())
            if terms is not None
        ]
        if not found:
            return None
        best = min(found, key=lambda maps: sum(len(m) for m in maps))
        for holders in best:
            out.update(holders)
    return out


_NOBODY: Map[ContainerID, None] = Map()


def memory_key(tree: PoolTree, pool: Pool, request: ContainerRequest) -> tuple[int, int, int]:
    """Components 5, 8 and 9 of the key: (memory burst, memory span, kinds missing).

    Only for containers whose memory is pinned (nri-plugins offers the root's memory
    to ``memory.preserve`` ones, the same from every pool).
    """
    if not request.pin_memory:
        return (0, 0, 0)
    size, span, lacks = tree.memory_terms[pool.index, request.memory_kinds]
    burst = 0
    if request.memory_burst is not None:
        burst = (size < request.memory_burst) if request.memory_burst else -size
    return (burst, span, lacks)


def _capacity_terms(request: ContainerRequest, cap: Capacity) -> tuple[int, int, int, int]:
    """Components 12, 14, 15 (as a flag: 1 when crowding counts) and 16 of the key."""
    if request.prefer_isolated and cap.isolated > 0:
        return (-cap.isolated, 0, 0, 0)
    if request.full > 0 and cap.shared > 0:
        return (0, -cap.shared, 0, 0)
    return (0, 0, 1, -cap.shared)


#: components 8-16 of a key decided at the burst components (`is_unlimited_burst`)
_DECIDED_BY_ID = (0,) * 9


def _key(
    *,
    short: bool,
    hinted: bool,
    unmet_preference: bool,
    affinity_score: float,
    memory: tuple[int, int, int],
    burst: tuple[int, int],
    priority: CPUPriority,
    priority_unmet: bool,
    depth: int,
    request: ContainerRequest,
    cap: Capacity,
    population: int,
    index: int,
) -> OfferKey:
    """The key from its figures (module docstring)."""
    head = (0 if hinted else 1, int(short), int(unmet_preference), -affinity_score, memory[0])
    if is_unlimited_burst(request):
        # their compareScores returns at the unlimited-burstable level rule: the level,
        # then the room at it, then the lower id; nothing after it is asked
        return (*head, *burst, *_DECIDED_BY_ID, index)
    prio, normal = _priority_terms(priority, priority_unmet)
    isolated, sliceable, crowds, shared = _capacity_terms(request, cap)
    if isolated:
        normal = 0
    return (
        *head,
        *burst,
        memory[1],
        memory[2],
        prio,
        -depth,
        isolated,
        normal,
        sliceable,
        population * crowds,
        shared,
        index,
    )


def offer_key(offer: Offer, *, hinted: bool, affinity_score: float, tree: PoolTree) -> OfferKey:
    """The sort key of one offer (see the module docstring)."""
    request = offer.grant.request
    return _key(
        short=offer.capacity.short,
        hinted=hinted,
        unmet_preference=not offer.preference_met,
        affinity_score=affinity_score,
        memory=memory_key(tree, offer.pool, request),
        burst=offer.burst,
        priority=request.cpu_priority,
        priority_unmet=offer.priority_unmet,
        depth=offer.pool.depth,
        request=request,
        cap=offer.capacity,
        population=offer.population,
        index=offer.pool.their_id,
    )


def key_bound(
    pool: Pool,
    *,
    tree: PoolTree,
    supply: Supply,
    request: ContainerRequest,
    hinted: bool,
    affinity_score: float,
    room: int,
    priorities: PriorityCPUs | None = None,
    burst: tuple[int, int] = (0, 0),
) -> OfferKey:
    """A lower bound of `offer_key` for any offer `pool` can make `request` (module doc).

    `burst` is `offers.burst_key` of the pool and `room` its `offers.allocatable_shared`.
    Every component is exact (they read the supply only) but the isolated preference,
    which counts as met unless it cannot be: an isolated offer needs at least
    `request.full` free isolated CPUs (and, for a mixed request, some shared CPUs), and
    a sliced offer meets it only when there is no preference.
    """
    i = pool.index
    unmet = False
    if request.kind in (CPUKind.EXCLUSIVE, CPUKind.MIXED) and request.prefer_isolated:
        free_iso = len(pool.isolated) - len(pool.isolated & supply.used)
        mixed = request.shared_milli > 0
        unmet = not (free_iso >= request.full and (supply.shared[i] or not mixed))
    miss = False
    if priorities is not None:
        miss = priority_unmet(
            request.cpu_priority,
            priorities,
            supply.shared[i],
            full=request.full,
            milli=request.shared_milli,
        )
    cap = capacity(pool, supply, request, room)
    return _key(
        short=cap.short,
        hinted=hinted,
        unmet_preference=unmet,
        affinity_score=affinity_score,
        memory=memory_key(tree, pool, request),
        burst=burst,
        priority=request.cpu_priority,
        priority_unmet=miss,
        depth=pool.depth,
        request=request,
        cap=cap,
        population=supply.population[i],
        index=pool.their_id,
    )


def key_bounds(
    pools: Iterable[Pool],
    *,
    tree: PoolTree,
    supply: Supply,
    request: ContainerRequest,
    hint: int | None,
    affinities: Mapping[int, float],
    rooms: Sequence[int],
    priorities: PriorityCPUs | None,
    bursts: Mapping[int, tuple[int, int]],
) -> list[tuple[OfferKey, Pool]]:
    """`key_bound` of each of `pools` (`rooms` and `bursts` by pool index, as
    `key_bound`'s `room` and `burst`), paired with its pool, smallest key first.

    The same keys as `key_bound` gives (module docstring), written out once for all
    pools: every term that depends on the request alone is found before the loop.
    """
    kind, full, milli = request.kind, request.full, request.shared_milli
    prefer = request.prefer_isolated
    # key_bound's isolated preference (component 3)
    unmet_possible = prefer and kind in (CPUKind.EXCLUSIVE, CPUKind.MIXED)
    mixed = milli > 0
    # priority_unmet (components 10, 13): the class's CPUs and the room asked
    priority = request.cpu_priority
    classes = None
    if priorities is not None and priority is not CPUPriority.NONE:
        classes = priorities.of(priority)
    asked = max(1000 * full + milli, 1)
    prio_unmet, normal_unmet = _priority_terms(priority, True)
    # offers.capacity (components 2, 12, 14-16)
    ranked = kind not in (CPUKind.RESERVED, CPUKind.NONE)
    part = milli if full or milli else 1
    # memory_key (components 5, 8, 9)
    pin, kinds, burst_limit = request.pin_memory, request.memory_kinds, request.memory_burst
    terms = tree.memory_terms
    decided = is_unlimited_burst(request)
    used, shared_sets, population = supply.used, supply.shared, supply.population
    out: list[tuple[OfferKey, Pool]] = []
    for pool in pools:
        i = pool.index
        unmet = 0
        if unmet_possible:
            free_iso = len(pool.isolated) - len(pool.isolated & used)
            unmet = int(not (free_iso >= full and (shared_sets[i] or not mixed)))
        if ranked:
            isolated = len(pool.isolated - used) - full if prefer else 0
            shared = rooms[i] - part
            if not prefer or isolated < 0:
                shared -= 1000 * full
        else:
            isolated = shared = 0
        if pin:
            size, span, lacks = terms[i, kinds]
            memory_burst: int = 0
            if burst_limit is not None:
                memory_burst = (size < burst_limit) if burst_limit else -size
        else:
            memory_burst = span = lacks = 0
        # (each key one flat tuple: building it from a head and parts cost a third more)
        hinted = 0 if i == hint else 1
        short = int(isolated < 0 or shared < 0)
        affinity = -affinities.get(i, 0)
        b0, b1 = bursts[i]
        if decided:
            z = 0  # _DECIDED_BY_ID
            key = (
                hinted, short, unmet, affinity, memory_burst, b0, b1,
                z, z, z, z, z, z, z, z, z, pool.their_id,
            )  # fmt: skip
            out.append((key, pool))
            continue
        prio = normal = 0
        if classes is not None and 1000 * len(classes & shared_sets[i]) < asked:
            prio, normal = prio_unmet, normal_unmet
        depth, index = -pool.depth, pool.their_id
        if prefer and isolated > 0:
            key = (
                hinted, short, unmet, affinity, memory_burst, b0, b1,
                span, lacks, prio, depth, -isolated, 0, 0, 0, 0, index,
            )  # fmt: skip
        elif full > 0 and shared > 0:
            key = (
                hinted, short, unmet, affinity, memory_burst, b0, b1,
                span, lacks, prio, depth, 0, normal, -shared, 0, 0, index,
            )  # fmt: skip
        else:
            key = (
                hinted, short, unmet, affinity, memory_burst, b0, b1,
                span, lacks, prio, depth, 0, normal, 0, population[i], -shared, index,
            )  # fmt: skip
        out.append((key, pool))
    out.sort(key=_first)
    return out


def _first(pair: tuple[OfferKey, Pool]) -> OfferKey:
    return pair[0]


def best_offer(
    offers: Iterable[Offer],
    *,
    hint: int | None,
    affinities: Mapping[int, float],
    tree: PoolTree,
) -> Offer | None:
    """The offer with the smallest key, or None when there are none."""
    ranked = sorted(
        offers,
        key=lambda o: offer_key(
            o,
            hinted=o.pool.index == hint,
            affinity_score=affinities.get(o.pool.index, 0),
            tree=tree,
        ),
    )
    return ranked[0] if ranked else None
