"""Supply, grants and offers: what each pool has left, and what a container would get.

Theory of operation: the state (`TopologyAwareState`) is only the set of `Grant`s, one per
container: the pool it lives in, its CPU kind, the exclusive CPUs it holds (EXCLUSIVE,
ISOLATED, or the whole-CPU part of MIXED), and its `ContainerRequest`.  Everything else
is derived from the grants and the fixed `PoolTree`:

- ``used``: all CPUs held exclusively (sliced from shared sets or taken from isolated);
- a pool's **shared set** is ``pool.sharable - used``; it shrinks when exclusive CPUs are
  sliced from the pool or from any pool overlapping it (ancestors, descendants);
- a pool's **shared demand** is the millicores of the SHARED and MIXED grants living in
  its subtree; the supply rule is ``demand(P) <= 1000 * |shared(P)|`` for every pool P:
  a container living in P runs on P's shared set, so it loads P and every ancestor, but
  no descendant;
- **memory demand** is likewise summed over a subtree and must stay within the memory
  of the pool's nodes.

`make_offer` computes, against an immutable state, what one pool would give a container
(or why it cannot); an `Offer` carries the would-be `Grant` plus the figures the sort
key (`scoring`) compares.  Committing an offer is just adding its grant to the state.
Nothing is mutated anywhere; an unchosen offer is simply dropped.

The derived figures of a state (`Supply`: used CPUs, per-pool shared sets, demand,
memory, population) are memoized on the state, and `with_grant`/`without` derive the
next state's figures from the previous ones and the one grant that changed, in
O(pools), so neither a decision nor a rebuild re-derives them from every grant.

`render` turns a grant into the `Assignment` the runtime sees (``hide-hyperthreads``,
``pinCPU``/``pinMemory`` and the preserve annotations are applied only here), and
`check_invariants` states what must hold after every decision.  `render_changed` renders,
for a decision's diff, only the containers whose rendering can differ.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from nri_resmgr.model import Assignment, ContainerID, CPUKind, PodID, PolicyState
from nri_resmgr.policy.common import one_thread_per_core, take_cores, take_cpus
from nri_resmgr.policy.topology_aware.pools import Pool, PoolTree
from nri_resmgr.policy.topology_aware.preferences import ContainerRequest
from nri_resmgr.topology.cpuset import CPUSet, IDSet, union
from nri_resmgr.topology.model import Topology

__all__ = [
    "Grant",
    "InvariantError",
    "Offer",
    "Supply",
    "TopologyAwareState",
    "check_addition",
    "check_invariants",
    "make_offer",
    "render",
    "render_all",
    "render_changed",
    "supply_of",
]

#: kinds whose grants consume shared capacity of their pool
SHARED_USERS = (CPUKind.SHARED, CPUKind.MIXED)


@dataclass(frozen=True, slots=True)
class Grant:
    """What one container holds."""

    container_id: ContainerID
    pod_id: PodID
    namespace: str
    pool: int
    kind: CPUKind
    exclusive: CPUSet
    request: ContainerRequest

    @property
    def shared_milli(self) -> int:
        return self.request.shared_milli if self.kind in SHARED_USERS else 0


class _SupplyMemo:
    """The `Supply` of one state for one pool tree, filled in on first use.

    A state is immutable, so its supply never goes stale; the memo only saves deriving it
    again, and lets `with_grant`/`without` derive the next state's supply from this one
    by the grant's own contribution instead of from every grant.  `entry` pairs the tree
    with its supply and is replaced as a whole (never half of it).
    """

    __slots__ = ("entry",)

    def __init__(self, entry: tuple[PoolTree, Supply] | None = None) -> None:
        self.entry = entry


@dataclass(frozen=True, slots=True)
class TopologyAwareState(PolicyState):
    grants: Mapping[ContainerID, Grant]
    #: derived figures (see `supply_of`); not part of the value
    memo: _SupplyMemo = field(default_factory=_SupplyMemo, compare=False, repr=False)

    def used(self) -> CPUSet:
        """CPUs held exclusively by some container."""
        entry = self.memo.entry
        if entry is not None:
            return entry[1].used
        return _used(self.grants.values())

    def with_grant(self, grant: Grant) -> TopologyAwareState:
        grants = {**self.grants, grant.container_id: grant}
        entry = self.memo.entry
        if entry is None:
            return TopologyAwareState(grants=grants)
        tree, supply = entry
        old = self.grants.get(grant.container_id)
        if old is not None:
            supply = _retract(tree, supply, old, grants.values())
        supply = _extend(tree, supply, grant)
        return TopologyAwareState(grants=grants, memo=_SupplyMemo((tree, supply)))

    def without(self, cid: ContainerID) -> TopologyAwareState:
        grants = dict(self.grants)
        old = grants.pop(cid, None)
        if old is None:
            return TopologyAwareState(grants=grants, memo=_SupplyMemo(self.memo.entry))
        # copied once more: a dict with a deleted slot would make every later copy
        # (`with_grant`) take CPython's slow per-item path
        grants = dict(grants)
        entry = self.memo.entry
        if entry is None:
            return TopologyAwareState(grants=grants)
        tree, supply = entry
        supply = _retract(tree, supply, old, grants.values())
        return TopologyAwareState(grants=grants, memo=_SupplyMemo((tree, supply)))


def _used(grants: Iterable[Grant]) -> CPUSet:
    return union(g.exclusive for g in grants)


@dataclass(frozen=True, slots=True)
class Supply:
    """Derived per-pool figures of one state."""

    used: CPUSet
    shared: tuple[CPUSet, ...]
    demand: tuple[int, ...]
    memory: tuple[int, ...]
    population: tuple[int, ...]


def supply_of(tree: PoolTree, state: TopologyAwareState) -> Supply:
    """The per-pool figures of `state` (memoized on the state, see `_SupplyMemo`)."""
    entry = state.memo.entry
    if entry is not None and entry[0] is tree:
        return entry[1]
    supply = _supply_from_scratch(tree, state)
    state.memo.entry = (tree, supply)
    return supply


def _supply_from_scratch(tree: PoolTree, state: TopologyAwareState) -> Supply:
    used = _used(state.grants.values())
    n = len(tree.pools)
    own_demand = [0] * n
    own_memory = [0] * n
    population = [0] * n
    for g in state.grants.values():
        own_demand[g.pool] += g.shared_milli
        own_memory[g.pool] += g.request.memory_bytes
        population[g.pool] += 1
    demand = [0] * n
    memory = [0] * n
    for p in tree.pools:
        for a in tree.ancestors(p.index):
            demand[a] += own_demand[p.index]
            memory[a] += own_memory[p.index]
    return Supply(
        used=used,
        shared=tuple(p.sharable - used for p in tree.pools),
        demand=tuple(demand),
        memory=tuple(memory),
        population=tuple(population),
    )


def _adjust(tree: PoolTree, supply: Supply, grant: Grant, used: CPUSet, sign: int) -> Supply:
    """`supply` with `grant`'s demand, memory and population added (sign 1) or taken
    away (-1), and the shared sets of the pools its exclusive CPUs touch re-derived from
    `used`: the same figures `_supply_from_scratch` would find, in O(pools)."""
    demand = list(supply.demand)
    memory = list(supply.memory)
    population = list(supply.population)
    for a in tree.ancestors(grant.pool):
        demand[a] += sign * grant.shared_milli
        memory[a] += sign * grant.request.memory_bytes
    population[grant.pool] += sign
    shared = supply.shared
    if grant.exclusive:
        shared = tuple(
            p.sharable - used if not p.cpus.isdisjoint(grant.exclusive) else shared[p.index]
            for p in tree.pools
        )
    return Supply(
        used=used,
        shared=shared,
        demand=tuple(demand),
        memory=tuple(memory),
        population=tuple(population),
    )


def _extend(tree: PoolTree, supply: Supply, grant: Grant) -> Supply:
    used = supply.used | grant.exclusive if grant.exclusive else supply.used
    return _adjust(tree, supply, grant, used, 1)


def _retract(tree: PoolTree, supply: Supply, grant: Grant, rest: Iterable[Grant]) -> Supply:
    """`supply` without `grant`; `rest` are the remaining grants.  Exclusive CPUs are
    re-collected from `rest`: a (broken) state may hold a CPU twice, and subtracting
    would then lose it."""
    used = _used(rest) if grant.exclusive else supply.used
    return _adjust(tree, supply, grant, used, -1)


@dataclass(frozen=True, slots=True)
class Offer:
    """One pool's answer to one request: the grant, and figures for the sort key."""

    pool: Pool
    grant: Grant
    #: the container's preference for isolated CPUs was met (or there was none)
    preference_met: bool
    #: millicores of shared capacity the pool keeps after the grant (isolated: free
    #: isolated CPUs x 1000)
    headroom: int
    #: containers already living in exactly this pool
    population: int


def _fits_memory(tree: PoolTree, supply: Supply, pool: Pool, req: ContainerRequest) -> str:
    kinds = ",".join(sorted(k.value for k in req.memory_kinds))
    if req.pin_memory and not pool.mems_of(req.memory_kinds):
        return f"no {kinds} memory"
    if req.memory_bytes:
        if req.memory_bytes > pool.memory_of(req.memory_kinds):
            return f"only {pool.memory_of(req.memory_kinds)} bytes of {kinds} memory"
        for a in tree.ancestors(pool.index):
            cap = sum(tree.pools[a].memory_bytes.values())
            if supply.memory[a] + req.memory_bytes > cap:
                return f"{tree.pools[a].name} has {cap - supply.memory[a]} bytes of memory free"
    return ""


def _shared_check(
    tree: PoolTree, supply: Supply, pool: Pool, taken: CPUSet, extra: int
) -> str:
    """Can `taken` be sliced off and `extra` milli be added to `pool`? "" if so."""
    ancestors = set(tree.ancestors(pool.index))
    taken_ids = taken.ids()
    for q in tree.pools:
        touched = q.index in ancestors or not q.cpus.isdisjoint(taken)
        if not touched:
            continue
        shared = supply.shared[q.index]
        # only the size of what is left matters: count it without building a set
        left = len(shared.ids() - taken_ids) if taken_ids else len(shared)
        if q.sharable and not left:
            return f"taking {taken} would empty the shared CPUs {shared} of {q.name}"
        need = supply.demand[q.index] + (extra if q.index in ancestors else 0)
        if need > 1000 * left:
            free = 1000 * left - supply.demand[q.index]
            what = f"after taking {taken} " if taken else ""
            return f"{q.name} has {free}m free on {left} shared CPUs {what}".rstrip()
    return ""


def _keepers(
    tree: PoolTree, topology: Topology, supply: Supply, pool: Pool, extra: int
) -> CPUSet:
    """Shared CPUs under `pool` to leave alone so that no pool below it runs dry.

    Bottom-up, every pool keeps enough of its shared CPUs for its shared demand (plus
    `extra` in `pool` itself), and at least one if it has shared CPUs at all, choosing
    threads of already broken cores first.
    """

    def kept(q: Pool) -> set[int]:
        out: set[int] = set()
        for child in q.children:
            out |= kept(tree.pools[child])
        demand = supply.demand[q.index] + (extra if q is pool else 0)
        need = max(-(-demand // 1000), 1 if q.sharable else 0)
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


def make_offer(
    *,
    tree: PoolTree,
    topology: Topology,
    supply: Supply,
    pool: Pool,
    container_id: ContainerID,
    pod_id: PodID,
    namespace: str,
    request: ContainerRequest,
    prefer: Sequence[CPUSet],
) -> Offer | str:
    """What `pool` would grant `request`, or a short reason why it cannot."""
    problem = _fits_memory(tree, supply, pool, request)
    if problem:
        return problem

    def offer(kind: CPUKind, exclusive: CPUSet, met: bool, headroom: int) -> Offer:
        grant = Grant(
            container_id=container_id,
            pod_id=pod_id,
            namespace=namespace,
            pool=pool.index,
            kind=kind,
            exclusive=exclusive,
            request=request,
        )
        return Offer(
            pool=pool,
            grant=grant,
            preference_met=met,
            headroom=headroom,
            population=supply.population[pool.index],
        )

    shared_now = supply.shared[pool.index]
    if request.kind in (CPUKind.NONE, CPUKind.RESERVED):
        return offer(request.kind, IDSet(), True, 0)
    if request.kind is CPUKind.SHARED:
        if not shared_now:
            return "no shared CPUs"
        problem = _shared_check(tree, supply, pool, IDSet(), request.shared_milli)
        if problem:
            return problem
        headroom = 1000 * len(shared_now) - supply.demand[pool.index] - request.shared_milli
        return offer(CPUKind.SHARED, IDSet(), True, headroom)

    # whole CPUs: isolated first when preferred, else sliced off the shared set;
    # hide-hyperthreads takes `full` whole cores and shows one thread of each
    mixed = request.shared_milli > 0

    def take(available: CPUSet) -> CPUSet | None:
        if request.hide_hyperthreads:
            first = prefer[0] if prefer else IDSet()
            return take_cores(topology, available, request.full, prefer=first)
        return take_cpus(topology, available, request.full, prefer=prefer)

    if request.prefer_isolated and (shared_now or not mixed):
        free_iso = pool.isolated - supply.used
        iso = take(free_iso)
        if iso is not None:
            problem = _shared_check(tree, supply, pool, IDSet(), request.shared_milli)
            if not problem:
                kind = CPUKind.MIXED if mixed else CPUKind.ISOLATED
                return offer(kind, iso, True, 1000 * (len(free_iso) - len(iso)))
    taken = take(shared_now)
    if taken is None:
        return f"only {len(shared_now)} shared CPUs to slice from"
    problem = _shared_check(tree, supply, pool, taken, request.shared_milli)
    if problem:
        # second try: leave every pool below enough shared CPUs for its own containers
        keep = _keepers(tree, topology, supply, pool, request.shared_milli)
        retry = take(shared_now - keep)
        if retry is None or _shared_check(tree, supply, pool, retry, request.shared_milli):
            return problem
        taken = retry
    headroom = (
        1000 * len(shared_now - taken) - supply.demand[pool.index] - request.shared_milli
    )
    kind = CPUKind.MIXED if mixed else CPUKind.EXCLUSIVE
    return offer(kind, taken, not request.prefer_isolated, headroom)


def render(
    *, tree: PoolTree, topology: Topology, supply: Supply, grant: Grant
) -> Assignment:
    """The assignment the runtime should apply for `grant` (module docstring)."""
    pool = tree.pools[grant.pool]
    req = grant.request
    if grant.kind is CPUKind.SHARED:
        cpus = supply.shared[pool.index]
    elif grant.kind in (CPUKind.EXCLUSIVE, CPUKind.ISOLATED):
        cpus = grant.exclusive
    elif grant.kind is CPUKind.MIXED:
        cpus = grant.exclusive | supply.shared[pool.index]
    elif grant.kind is CPUKind.RESERVED:
        cpus = tree.reserved
    else:
        cpus = IDSet()
    if req.hide_hyperthreads:
        cpus = one_thread_per_core(topology, cpus)
    if not req.pin_cpu:
        cpus = IDSet()
    mems = pool.mems_of(req.memory_kinds) if req.pin_memory else IDSet()
    return Assignment(
        container_id=grant.container_id, cpus=cpus, mems=mems, kind=grant.kind, pool=pool.name
    )


def render_all(
    tree: PoolTree, topology: Topology, state: TopologyAwareState
) -> dict[ContainerID, Assignment]:
    supply = supply_of(tree, state)
    return {
        cid: render(tree=tree, topology=topology, supply=supply, grant=g)
        for cid, g in state.grants.items()
    }


def render_changed(
    tree: PoolTree,
    topology: Topology,
    old: TopologyAwareState,
    new: TopologyAwareState,
    touched: Collection[ContainerID],
) -> tuple[dict[ContainerID, Assignment], dict[ContainerID, Assignment]]:
    """Renderings in `old` and in `new` of every container whose rendering can differ.

    A container's rendering is a function of its grant, of its pool's shared set (SHARED
    and MIXED grants only) and of the fixed tree and topology.  So between two states in
    which only the grants of `touched` differ, the containers whose renderings can differ
    are the touched ones and the shared users of the pools whose shared set changed.
    Finding those pools compares the two supplies (O(pools)); only when some changed are
    the grants scanned for their shared users, and those (inherently) re-rendered.  Any
    other container renders the same in both states, so `diff_updates` over these two maps
    equals `diff_updates` over `render_all` of both states, at O(what changed) cost.
    """
    before_supply = supply_of(tree, old)
    after_supply = supply_of(tree, new)
    changed = {
        p.index
        for p in tree.pools
        if before_supply.shared[p.index] is not after_supply.shared[p.index]
        and before_supply.shared[p.index] != after_supply.shared[p.index]
    }
    cids = {cid for cid in touched if cid in old.grants or cid in new.grants}
    if changed:
        cids.update(
            cid
            for cid, g in new.grants.items()
            if g.pool in changed and g.kind in SHARED_USERS and cid in old.grants
        )

    def rendered(state: TopologyAwareState, supply: Supply) -> dict[ContainerID, Assignment]:
        return {
            cid: render(tree=tree, topology=topology, supply=supply, grant=state.grants[cid])
            for cid in sorted(cids)
            if cid in state.grants
        }

    return rendered(old, before_supply), rendered(new, after_supply)


class InvariantError(AssertionError):
    """A state that breaks one of the allocator's invariants."""


def check_invariants(tree: PoolTree, topology: Topology, state: TopologyAwareState) -> None:
    """Raise `InvariantError` listing every broken invariant of `state`.

    - no CPU is held exclusively by two containers;
    - exclusive CPUs are inside their pool, never reserved, and isolated grants hold only
      isolated CPUs (other exclusive grants none);
    - exclusive and shared sets are disjoint, every pool that had shared CPUs still has
      some, and each pool's shared demand fits its shared set;
    - every pinned container's CPUs are non-empty and online; memory demand fits.
    """
    problems: list[str] = []
    seen: dict[int, ContainerID] = {}
    for cid, g in sorted(state.grants.items()):
        for c in g.exclusive:
            if c in seen:
                problems.append(f"cpu {c} is exclusive to both {seen[c]} and {cid}")
            seen[c] = cid
        problems.extend(_grant_problems(tree, topology, cid, g))
    problems.extend(_pool_problems(tree, supply_of(tree, state)))
    online = topology.online_cpus()
    for cid, a in sorted(render_all(tree, topology, state).items()):
        problems.extend(_render_problems(online, cid, state.grants[cid], a))
    if problems:
        raise InvariantError("; ".join(problems))


def check_addition(
    tree: PoolTree, topology: Topology, state: TopologyAwareState, grant: Grant
) -> None:
    """`check_invariants` of `state.with_grant(grant)`, for a `state` that satisfies them.

    Raises (with the problems the new grant brings) exactly when the full check of the
    larger state would, but in O(pools + containers re-rendered) instead of O(all
    containers): in a valid state the problems can only come from the new grant itself,
    from the per-pool figures (all checked), and from the renderings that change (the new
    container and the shared users of pools whose shared set changed, `render_changed`).
    A grant that replaces one of the same container gets the full check.
    """
    trial = state.with_grant(grant)
    if grant.container_id in state.grants:
        check_invariants(tree, topology, trial)
        return
    problems: list[str] = []
    used = supply_of(tree, state).used
    cid = grant.container_id
    for c in grant.exclusive & used:
        holder = next(k for k, g in sorted(state.grants.items()) if c in g.exclusive)
        problems.append(f"cpu {c} is exclusive to both {holder} and {cid}")
    problems.extend(_grant_problems(tree, topology, cid, grant))
    problems.extend(_pool_problems(tree, supply_of(tree, trial)))
    online = topology.online_cpus()
    _, rendered = render_changed(tree, topology, state, trial, (cid,))
    for other, a in rendered.items():
        problems.extend(_render_problems(online, other, trial.grants[other], a))
    if problems:
        raise InvariantError("; ".join(problems))


def _grant_problems(
    tree: PoolTree, topology: Topology, cid: ContainerID, g: Grant
) -> list[str]:
    """What is wrong with one grant on its own (see `check_invariants`)."""
    problems: list[str] = []
    pool = tree.pools[g.pool]
    if not g.exclusive <= pool.cpus:
        problems.append(f"{cid}: exclusive {g.exclusive} outside pool {pool.name}")
    if not g.exclusive.isdisjoint(tree.reserved):
        problems.append(f"{cid}: exclusive {g.exclusive} includes reserved CPUs")
    if g.kind is CPUKind.ISOLATED and not g.exclusive <= pool.isolated:
        problems.append(f"{cid}: isolated grant {g.exclusive} holds non-isolated CPUs")
    if g.kind in (CPUKind.EXCLUSIVE, CPUKind.ISOLATED, CPUKind.MIXED):
        if g.request.hide_hyperthreads:
            cores = topology.cores_of(g.exclusive)
            whole = all(t == topology.core_cpus(k) for k, t in cores.items())
            if len(cores) != g.request.full or not whole:
                problems.append(f"{cid}: holds {g.exclusive}, not {g.request.full} cores")
        elif len(g.exclusive) != g.request.full:
            problems.append(f"{cid}: holds {len(g.exclusive)} CPUs for {g.request.full}")
    elif g.exclusive:
        problems.append(f"{cid}: {g.kind} grant holds exclusive CPUs {g.exclusive}")
    return problems


def _pool_problems(tree: PoolTree, supply: Supply) -> list[str]:
    """What is wrong with the per-pool figures (see `check_invariants`)."""
    problems: list[str] = []
    for p in tree.pools:
        shared = supply.shared[p.index]
        if not shared.isdisjoint(supply.used):
            problems.append(f"{p.name}: shared {shared} overlaps exclusive {supply.used}")
        if p.sharable and not shared:
            problems.append(f"{p.name}: shared set is empty")
        if supply.demand[p.index] > 1000 * len(shared):
            problems.append(
                f"{p.name}: shared demand {supply.demand[p.index]}m exceeds {len(shared)} CPUs"
            )
        if supply.memory[p.index] > sum(p.memory_bytes.values()):
            problems.append(f"{p.name}: memory demand {supply.memory[p.index]} exceeds supply")
    return problems


def _render_problems(online: CPUSet, cid: ContainerID, g: Grant, a: Assignment) -> list[str]:
    """What is wrong with one container's rendering (see `check_invariants`)."""
    problems: list[str] = []
    if g.kind is not CPUKind.NONE and g.request.pin_cpu and not a.cpus:
        problems.append(f"{cid}: pinned to no CPUs")
    if not a.cpus <= online:
        problems.append(f"{cid}: CPUs {a.cpus - online} are not online")
    return problems
