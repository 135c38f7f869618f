"""Offers: what one pool would grant one container, computed against a state's supply.

Theory of operation: `make_offer` answers, against the immutable `Supply` of a state,
what one pool would give a request (or a short reason why it cannot); an `Offer`
carries the would-be `Grant` plus the figures the sort key (`scoring`) compares.
Committing an offer is just adding its grant to the state (`with_grant`); nothing is
mutated anywhere, and an unchosen offer is simply dropped.

A pool's room for shared work is nri-plugins' ``AllocatableSharedCPU``
(`allocatable_shared`): its free shared millicores, capped by every ancestor's, less 1m
when a container with no CPU request lives in its subtree (the *1m rule*).  A shared
request must fit that room; whole CPUs are taken from the pool's free isolated CPUs when
preferred and there are enough, else sliced off its shared set when the room holds them
(``AllocatableSharedCPU() >= 1000*cnt``).  Which CPUs is their allocator's pick
(`cpu_allocator`) out of the pool's *sliceable* CPUs (their ``SliceableCPUs``): for a
leaf its room's worth of its shared CPUs, for an inner pool the union of that of every
pool below it.  The supply rule of `state` stays checked on top (`_shared_check`): when
their pick would leave a pool below without enough shared CPUs (an inner pool's
sliceable set may hold a child's last ones), a second try keeps those aside
(`_keepers`).  Slicing may empty the shared set of a pool nobody shares; a later shared
request then goes where shared CPUs are left.

Each offer carries nri-plugins' capacity scores (`Capacity`, their ``GetScore``): the
isolated CPUs and the shared room left after the grant, which rank the pools
(`scoring`).  Reserved requests must fit the reserved capacity
(``reservedResources.cpu``: ``750m`` is 750m, not the 1000m of the CPU it rounds up to).
`exact_offer` is the rebuild's question: what would `pool` grant if the container kept
exactly the CPUs it holds now.

A request's CPU priority (`priority`) marks the offer of a pool short of CPUs of that
class (`Offer.priority_unmet`, for the sort key) and makes the allocator rank CPUs of
the class first; ``require-isolated-cpus`` leaves only the isolated way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nri_resmgr.model import ContainerID, CPUKind, MemoryKind, PodID
from nri_resmgr.policy.cpu_allocator import CPUAllocator
from nri_resmgr.policy.topology_aware.pools import TOPOLOGY_LEVELS, Pool, PoolTree
from nri_resmgr.policy.topology_aware.preferences import ContainerRequest
from nri_resmgr.policy.topology_aware.priority import PriorityCPUs, priority_unmet
from nri_resmgr.policy.topology_aware.state import Grant, Supply
from nri_resmgr.topology.cpuset import CPUSet, IDSet, union
from nri_resmgr.topology.model import Topology

__all__ = [
    "Capacity",
    "Offer",
    "allocatable_by_pool",
    "allocatable_shared",
    "burst_key",
    "capacity",
    "exact_offer",
    "is_burst_ranked",
    "is_unlimited_burst",
    "make_offer",
    "sliceable_cpus",
]


@dataclass(frozen=True, slots=True)
class Capacity:
    """nri-plugins' capacity scores of one pool for one request (``supply.GetScore``)."""

    #: free isolated CPUs left after the grant (requests preferring isolated CPUs; else 0)
    isolated: int = 0
    #: shared room left after the grant, in millicores (`allocatable_shared`, less the
    #: whole CPUs when sliced, less the fraction, or 1m for a request of none)
    shared: int = 0

    @property
    def short(self) -> bool:
        """Too little isolated or shared capacity: the pool loses to any that has it."""
        return self.isolated < 0 or self.shared < 0


def capacity(pool: Pool, supply: Supply, request: ContainerRequest, room: int) -> Capacity:
    """`Capacity` of `pool` (whose `allocatable_shared` is `room`) for `request`.

    Reserved and unpinned (``cpu.preserve``) requests are not ranked by it (they have
    one candidate pool): zeros.
    """
    if request.kind in (CPUKind.RESERVED, CPUKind.NONE):
        return Capacity()
    full, part = request.full, request.shared_milli
    if not full and not part:
        part = 1
    isolated = len(pool.isolated - supply.used) - full if request.prefer_isolated else 0
    shared = room - part
    if not request.prefer_isolated or isolated < 0:
        shared -= 1000 * full
    return Capacity(isolated=isolated, shared=shared)


@dataclass(frozen=True, slots=True)
class Offer:
    """One pool's answer to one request: the grant, and figures for the sort key."""

    pool: Pool
    grant: Grant
    #: the container's preference for isolated CPUs was met (or there was none)
    preference_met: bool
    #: nri-plugins' capacity scores of the pool for the request
    capacity: Capacity
    #: containers already living in exactly this pool
    population: int
    #: the pool's free shared CPUs of the request's CPU priority class cannot hold it
    #: (`priority.priority_unmet`; False without a priority)
    priority_unmet: bool = False
    #: the Burstable components of the sort key (`burst_key`)
    burst: tuple[int, int] = (0, 0)


def allocatable_shared(tree: PoolTree, supply: Supply, pool: Pool) -> int:
    """Millicores a new shared container in `pool` could use without overcommitting it
    or an ancestor (nri-plugins ``AllocatableSharedCPU``): the free shared millicores of
    the pool and of each ancestor, the smallest, less 1m when a container with no CPU
    request lives in the pool's subtree (the 1m rule; an ancestor's own such
    containers do not count)."""
    free = min(1000 * len(supply.shared[a]) - supply.demand[a] for a in tree.ancestors(pool.index))
    return free - 1 if supply.zero_req[pool.index] else free


def allocatable_by_pool(tree: PoolTree, supply: Supply) -> list[int]:
    """`allocatable_shared` of every pool, in one pass down the tree (pools are
    numbered breadth first, so a parent comes before its children)."""
    free: list[int] = []
    demand, shared, zero = supply.demand, supply.shared, supply.zero_req
    for p in tree.pools:
        own = 1000 * len(shared[p.index]) - demand[p.index]
        free.append(own if p.parent is None else min(own, free[p.parent]))
    return [f - 1 if zero[i] else f for i, f in enumerate(free)]


def sliceable_cpus(
    tree: PoolTree,
    allocator: CPUAllocator,
    supply: Supply,
    pool: Pool,
    rooms: Sequence[int],
) -> CPUSet | None:
    """The shared CPUs exclusive ones may be sliced from in `pool` (nri-plugins'
    ``SliceableCPUs``): a leaf's room's worth of its shared CPUs (`rooms` is
    `allocatable_by_pool`), as the allocator picks them; for an inner pool the union of
    that of every pool below it.  None when a pool's shared CPUs cannot hold its room.
    """
    below = tree.subtree(pool.index)
    if len(below) > 1:
        below = below[1:]
    picks = []
    for i in below:
        # Go's integer division: a negative room slices nothing
        count = rooms[i] // 1000 if rooms[i] >= 0 else 0
        got = allocator.allocate(supply.shared[i], count)
        if got is None:
            return None
        picks.append(got)
    return union(picks)


def is_burst_ranked(request: ContainerRequest) -> bool:
    """Whether `burst_key` ranks `request` (a Burstable container's)."""
    return bool(request.limit_milli) or request.unlimited_level is not None


def is_unlimited_burst(request: ContainerRequest) -> bool:
    """Whether `burst_key` ranks `request` by its ``unlimitedBurstable`` level (a
    Burstable container without a CPU limit)."""
    return not request.limit_milli and request.unlimited_level is not None


def burst_key(
    tree: PoolTree,
    supply: Supply,
    pool: Pool,
    request: ContainerRequest,
    *,
    room: int | None = None,
) -> tuple[int, int]:
    """The Burstable components of the sort key (`scoring`), smaller first.

    With a CPU limit: 0 when the pool has room for the limit (`allocatable_shared`, or
    `room` when the caller has it), so the deepest such pool wins.  Without one: 0 for
    a pool at the preferred level (the next level out with pools,
    `PoolTree.existing_level`), then more room first; 1 for a pool below that level, 2
    above it.  Others: (0, 0).
    """
    if not is_burst_ranked(request):
        return (0, 0)
    if room is None:
        room = allocatable_shared(tree, supply, pool)
    if request.limit_milli:
        return (0 if room >= request.limit_milli else 1, 0)
    assert request.unlimited_level is not None  # is_burst_ranked
    target = TOPOLOGY_LEVELS.index(tree.existing_level(request.unlimited_level))
    mine = TOPOLOGY_LEVELS.index(pool.level)
    if mine == target:
        return (0, -room)
    return (1 if mine > target else 2, 0)


#: no CPUs: the exclusive CPUs of an offer that takes none (an `IDSet` is immutable)
_NO_CPUS = IDSet()
#: every memory kind: `PoolTree.memory_terms`' key of a pool's whole memory
_EVERY_KIND = frozenset(MemoryKind)


def _fits_memory(tree: PoolTree, supply: Supply, pool: Pool, req: ContainerRequest) -> str:
    """Whether `pool` and its ancestors hold `req`'s memory: "" if so, else why not
    (the pools' sizes from `PoolTree.memory_terms`: every placement asks)."""
    if req.pin_memory and not pool.mems_of(req.memory_kinds):
        return f"no {_kinds_text(req)} memory"
    need = req.memory_bytes
    if need:
        terms = tree.memory_terms
        have = terms[pool.index, frozenset(req.memory_kinds)][0]
        if need > have:
            return f"only {have} bytes of {_kinds_text(req)} memory"
        for a in tree.ancestors(pool.index):
            cap = terms[a, _EVERY_KIND][0]
            if supply.memory[a] + need > cap:
                return f"{tree.pools[a].name} has {cap - supply.memory[a]} bytes of memory free"
    return ""


def _kinds_text(req: ContainerRequest) -> str:
    return ",".join(sorted(k.value for k in req.memory_kinds))


def _shared_check(
    tree: PoolTree, supply: Supply, pool: Pool, taken: CPUSet, request: ContainerRequest
) -> str:
    """Can `taken` be sliced off and `request`'s share be added to `pool`? "" if so.

    Every touched pool (`pool`, its ancestors, and any pool `taken` overlaps) must keep
    its need (`Supply.need`) on what is left of its shared set; a pool nobody shares
    may be sliced empty.
    """
    line = tree.ancestors(pool.index)
    ancestors = set(line)
    taken_ids = taken.ids()
    extra = request.shared_milli
    sharer = _is_sharer(request)
    demand, sharers = supply.demand, supply.sharers
    # with nothing taken, only `pool` and its ancestors are touched: those, in pool
    # order (a parent is numbered before its children), as the walk of all would meet them
    touched = tree.pools if taken else [tree.pools[a] for a in reversed(line)]
    for q in touched:
        mine = q.index in ancestors
        if not mine and q.cpus.isdisjoint(taken):
            continue
        shared = supply.shared[q.index]
        # only the size of what is left matters: count it without building a set
        left = len(shared.ids() - taken_ids) if taken_ids else len(shared)
        # Supply.need, inlined (a decision asks it for every pool)
        need = demand[q.index] + (extra if mine else 0)
        if sharers[q.index] or (sharer and mine):
            need = max(need, 1)
        if need > 1000 * left:
            if taken and not left:
                return (
                    f"taking {taken} would empty the shared CPUs {shared} of {q.name}, "
                    "which its shared containers need"
                )
            free = 1000 * left - supply.demand[q.index]
            what = f"after taking {taken} " if taken else ""
            return f"{q.name} has {free}m free on {left} shared CPUs {what}".rstrip()
    return ""


def _is_sharer(request: ContainerRequest) -> bool:
    """Whether a grant of `request` runs on its pool's shared set (SHARED or MIXED)."""
    return request.kind is CPUKind.SHARED or (request.full > 0 and request.shared_milli > 0)


def _keepers(
    tree: PoolTree, topology: Topology, supply: Supply, pool: Pool, request: ContainerRequest
) -> CPUSet:
    """Shared CPUs under `pool` to leave alone so that no pool below it runs dry.

    Bottom-up, every pool keeps enough of its shared CPUs for its need (`Supply.need`,
    with `request`'s share in `pool` itself), choosing threads of already broken cores
    first; a pool nobody shares keeps none.
    """
    extra = request.shared_milli
    sharer = _is_sharer(request)

    def kept(q: Pool) -> set[int]:
        out: set[int] = set()
        for child in q.children:
            out |= kept(tree.pools[child])
        mine = q is pool
        need_milli = supply.need(q.index, extra=extra if mine else 0, sharer=sharer and mine)
        need = -(-need_milli // 1000)
        shared = supply.shared[q.index]
        # keep threads of cores that are already broken; whole cores are worth more
        spare = sorted(
            shared.ids() - out,
            key=lambda c: (topology.siblings(c) <= shared, -c),
        )
        while len(out) < need and spare:
            out.add(spare.pop(0))
        return out

    return IDSet(kept(pool))


def _take(
    allocator: CPUAllocator,
    available: CPUSet,
    count: int,
    *,
    prefer: Sequence[CPUSet],
    request: ContainerRequest,
) -> CPUSet | None:
    """`count` CPUs of `available` as the allocator picks them (with the request's CPU
    priority), from each of the `prefer` tiers first in turn (rebuild and update: the
    container's CPUs now; ``pick-resources-by-hints``: the hinted CPUs)."""
    taken = IDSet()
    for tier in prefer:
        part = (available & tier) - taken
        need = count - len(taken)
        if need <= 0 or not part:
            continue
        got = allocator.allocate(part, min(need, len(part)), priority=request.cpu_priority)
        taken = taken | (got or IDSet())
    rest = allocator.allocate(available - taken, count - len(taken), priority=request.cpu_priority)
    return None if rest is None else taken | rest


def make_offer(
    *,
    tree: PoolTree,
    topology: Topology,
    allocator: CPUAllocator,
    supply: Supply,
    pool: Pool,
    container_id: ContainerID,
    pod_id: PodID,
    namespace: str,
    request: ContainerRequest,
    prefer: Sequence[CPUSet],
    priorities: PriorityCPUs | None = None,
    burst: tuple[int, int] | None = None,
    rooms: Sequence[int] | None = None,
) -> Offer | str:
    """What `pool` would grant `request`, or a short reason why it cannot.

    `priorities` are the machine's CPU priority classes (`priority.priority_cpus`);
    without them the request's CPU priority is ignored for the sort key.  `burst` is
    `burst_key` of the pool and `rooms` `allocatable_by_pool` when the caller has them.
    """
    problem = _fits_memory(tree, supply, pool, request)
    if problem:
        return problem
    if rooms is None:
        rooms = allocatable_by_pool(tree, supply)
    room = rooms[pool.index]
    unmet = False
    if priorities is not None:
        unmet = priority_unmet(
            request.cpu_priority,
            priorities,
            supply.shared[pool.index],
            full=request.full,
            milli=request.shared_milli,
        )

    def offer(kind: CPUKind, exclusive: CPUSet, met: bool) -> Offer:
        grant = Grant(
            container_id=container_id,
            pod_id=pod_id,
            namespace=namespace,
            pool=pool.index,
            kind=kind,
            exclusive=exclusive,
            request=request,
        )
        return _offer(
            supply=supply,
            pool=pool,
            grant=grant,
            met=met,
            capacity=capacity(pool, supply, request, room),
            unmet=unmet,
            burst=burst_key(tree, supply, pool, request, room=room) if burst is None else burst,
        )

    shared_now = supply.shared[pool.index]
    if request.kind is CPUKind.RESERVED:
        free = tree.reserved_milli - supply.reserved_demand
        if request.shared_milli > free:
            return f"{free}m free of {tree.reserved_milli}m reserved on {tree.reserved}"
        return offer(request.kind, _NO_CPUS, True)
    if request.kind is CPUKind.NONE:
        return offer(request.kind, _NO_CPUS, True)
    if request.kind is CPUKind.SHARED:
        if not shared_now:
            return "no shared CPUs"
        if request.shared_milli and room < request.shared_milli:
            return f"{room}m of shared capacity allocatable, {request.shared_milli}m requested"
        problem = _shared_check(tree, supply, pool, _NO_CPUS, request)
        if problem:
            return problem
        return offer(CPUKind.SHARED, _NO_CPUS, True)

    # whole CPUs: isolated first when preferred, else sliced off the shared set;
    # (hide-hyperthreads changes only what is shown: `rendering`, as nri-plugins does)
    mixed = request.shared_milli > 0

    def take(available: CPUSet) -> CPUSet | None:
        return _take(allocator, available, request.full, prefer=prefer, request=request)

    free_iso = pool.isolated - supply.used
    if request.prefer_isolated and (shared_now or not mixed) and len(free_iso) >= request.full:
        iso = take(free_iso)
        if iso is not None:
            problem = _shared_check(tree, supply, pool, _NO_CPUS, request)
            if mixed and room < request.shared_milli:
                problem = f"{room}m of shared capacity allocatable, {request.shared_milli}m needed"
            if not problem:
                return offer(CPUKind.MIXED if mixed else CPUKind.ISOLATED, iso, True)
            if request.require_isolated:
                return f"require-isolated-cpus: {problem}"
    if request.require_isolated:
        if mixed and not shared_now:
            return "require-isolated-cpus: no shared CPUs for the fraction"
        return f"require-isolated-cpus: {len(free_iso)} free isolated CPUs, {request.full} needed"
    if room < 1000 * request.full + request.shared_milli:
        return (
            f"{room}m of shared capacity allocatable, "
            f"{1000 * request.full + request.shared_milli}m needed"
        )
    sliceable = sliceable_cpus(tree, allocator, supply, pool, rooms)
    if sliceable is None:
        return f"cannot tell the sliceable CPUs of {shared_now}"
    taken = take(sliceable)
    if taken is None:
        return f"only {len(sliceable)} sliceable CPUs ({sliceable}) of shared {shared_now}"
    problem = _shared_check(tree, supply, pool, taken, request)
    if problem:
        # second try: leave every pool below enough shared CPUs for its own containers
        keep = _keepers(tree, topology, supply, pool, request)
        retry = take(sliceable - keep)
        if retry is None or _shared_check(tree, supply, pool, retry, request):
            return problem
        taken = retry
    kind = CPUKind.MIXED if mixed else CPUKind.EXCLUSIVE
    return offer(kind, taken, not request.prefer_isolated)


def exact_offer(
    *,
    tree: PoolTree,
    supply: Supply,
    pool: Pool,
    container_id: ContainerID,
    pod_id: PodID,
    namespace: str,
    request: ContainerRequest,
    kind: CPUKind,
    cpus: CPUSet,
) -> Offer | str:
    """What `pool` would grant `request` by keeping exactly `cpus`, or why it cannot.

    Rebuild's offer for a container whose reported CPUs could be its exclusive grant
    (`kind` ISOLATED or EXCLUSIVE); only the memory is checked here.  Whether the CPUs
    are free and the pools keep their shared CPUs is the invariants' question
    (`invariants.check_addition`).
    """
    problem = _fits_memory(tree, supply, pool, request)
    if problem:
        return problem
    isolated = kind is CPUKind.ISOLATED
    grant = Grant(
        container_id=container_id,
        pod_id=pod_id,
        namespace=namespace,
        pool=pool.index,
        kind=kind,
        exclusive=cpus,
        request=request,
    )
    met = isolated == request.prefer_isolated
    room = allocatable_shared(tree, supply, pool)
    return _offer(
        supply=supply,
        pool=pool,
        grant=grant,
        met=met,
        capacity=capacity(pool, supply, request, room),
    )


def _offer(
    *,
    supply: Supply,
    pool: Pool,
    grant: Grant,
    met: bool,
    capacity: Capacity,
    unmet: bool = False,
    burst: tuple[int, int] = (0, 0),
) -> Offer:
    """`grant` as an offer of `pool`, with the pool's population from `supply`."""
    return Offer(
        pool=pool,
        grant=grant,
        preference_met=met,
        capacity=capacity,
        population=supply.population[pool.index],
        priority_unmet=unmet,
        burst=burst,
    )
