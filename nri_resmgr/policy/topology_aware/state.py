"""The topology-aware state: grants, and the supply derived from them.

Theory of operation: the state (`TopologyAwareState`) is the set of `Grant`s, one per
container: the pool it lives in, its CPU kind, the exclusive CPUs it holds (EXCLUSIVE,
ISOLATED, or the whole-CPU part of MIXED), and its `ContainerRequest`.  Everything else
is derived from the grants and the fixed `PoolTree`, as the state's `Supply`:

- ``used``: all CPUs held exclusively (sliced from shared sets or taken from isolated);
- a pool's **shared set** is ``pool.sharable - used``; it shrinks when exclusive CPUs are
  sliced from the pool or from any pool overlapping it (ancestors, descendants);
- a pool's **shared demand** is the millicores of the SHARED and MIXED grants living in
  its subtree, and its **sharers** the number of those grants; the supply rule is
  ``need(P) <= 1000 * |shared(P)|`` for every pool P, where ``need(P)`` is the demand,
  but at least 1 while P has sharers (`Supply.need`): a container living in P runs on
  P's shared set, so it loads P and every ancestor, but no descendant.  A pool with no
  sharers may lose every shared CPU to exclusive grants (nri-plugins slices an idle
  shared set empty too); one with sharers, even of 0m (BestEffort), never does;
- ``reserved_demand``: the millicores of the RESERVED grants, which must stay within
  the reserved capacity (`PoolTree.reserved_milli`: ``750m`` reserves 750m, not a CPU);
- **memory demand** is likewise summed over a subtree and must stay within the memory
  of the pool's nodes; **population** counts the containers living in exactly a pool
  on its shared or exclusive CPUs (not reserved or unpinned ones: nri-plugins'
  colocation count compares containers of the same CPU type);
- **zero requests**: the containers in a pool's subtree with no CPU request
  (BestEffort, Burstable with 0m; not reserved ones), for which nri-plugins keeps 1m of
  the pool's shared capacity back (`offers.allocatable_shared`).

Two indexes ride along in the supply, so that no decision walks the other grants:
**holders** counts the grants holding each exclusive CPU (a CPU leaves ``used`` when its
count drops to zero, even in a broken state holding it twice), and **users** keeps, per
pool, the SHARED and MIXED grants living in exactly it (`rendering.render_changed`
re-renders those of the pools whose shared set changed); **subjects** keeps the grants by
each (key, value) of their subject that groups containers (`expressions.Subject.grouping`),
so an affinity rule on a name, namespace or label is weighed against the containers it
can match, not against every container (`scoring.affinity_by_pool`): an entry held by
one grant (a pod's name, most of the items) is that grant's id in a 1-tuple, one held by
more a map of their ids (`Holding`; a one-entry map cost about 0.7 MiB at 1,000 live
containers, docs/benchmarks.md, "RSS at 1,000 live"); **irq** keeps the
grants whose request carries an ``irq-affinity`` annotation, so that the interrupt wishes
handed to the controllers at every commit (`TopologyAwarePolicy.irq_use`) cost
O(annotated containers), not O(live containers).

The supply is a declared field of the state, built when the state is built and never
written afterwards: `TopologyAwareState.empty(tree)` starts with the empty supply, and
`with_grant`/`without` derive the next state's supply from this one and the one grant
that changed, in O(pools) (`supply_from_scratch` is the plain derivation the tests
compare it with).

**Cost.**  The grants and the indexes are persistent maps (`immutables.Map`, the
hash array mapped trie behind `contextvars`): adding or dropping a grant shares all but
O(log n) of the old map with the new one, so a state costs O(pools + log containers)
to derive, whatever runs on the node, and the old state stays valid for a decision
that is refused.  (Measured against `pyrsistent.pmap` and a copied dict in
docs/benchmarks.md, "Persistent maps".)

The state carries the tree it was built for, so no caller can pair a supply with another
tree.  Neither the tree nor the supply is part of the value: two
states are equal when their grants are.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from immutables import Map

from nri_resmgr.model import ContainerID, CPUKind, PodID, PolicyState
from nri_resmgr.policy.kit.holders import Holders, hold, holders_of
from nri_resmgr.policy.topology_aware.pools import PoolTree
from nri_resmgr.policy.topology_aware.preferences import ContainerRequest
from nri_resmgr.topology.cpuset import CPUSet, union

__all__ = [
    "SHARED_USERS",
    "Grant",
    "Holding",
    "Supply",
    "TopologyAwareState",
    "supply_from_scratch",
]

#: kinds whose grants consume shared capacity of their pool
SHARED_USERS = (CPUKind.SHARED, CPUKind.MIXED)


#: the grants under one entry of the subject index: one id, or a map of two or more
Holding = tuple[ContainerID] | Map[ContainerID, None]


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

    @property
    def reserved_milli(self) -> int:
        return self.request.shared_milli if self.kind is CPUKind.RESERVED else 0

    @property
    def zero_request(self) -> bool:
        """A container with no CPU request on the pool's CPUs (`Supply.zero_req`)."""
        return self.request.zero_cpu_request and self.kind is not CPUKind.RESERVED

    @property
    def colocated(self) -> bool:
        """Counted in its pool's population: on shared or exclusive CPUs."""
        return self.kind not in (CPUKind.RESERVED, CPUKind.NONE)


@dataclass(frozen=True, slots=True)
class Supply:
    """Derived per-pool figures of one state (indexed by pool number)."""

    used: CPUSet
    shared: tuple[CPUSet, ...]
    demand: tuple[int, ...]
    memory: tuple[int, ...]
    population: tuple[int, ...]
    #: SHARED and MIXED grants living in each pool's subtree
    sharers: tuple[int, ...]
    #: millicores of the RESERVED grants (on the reserved CPUs)
    reserved_demand: int
    #: grants with no CPU request living in each pool's subtree (`Grant.zero_request`)
    zero_req: tuple[int, ...] = ()
    #: CPU -> how many grants hold it exclusively (only CPUs held at least once)
    holders: Holders = field(default_factory=Map)
    #: the SHARED and MIXED grants living in exactly each pool (by container id)
    users: tuple[Map[ContainerID, None], ...] = ()
    #: (key, value) of a grant's subject -> the grants with it (module docstring)
    subjects: Map[tuple[str, str], Holding] = field(default_factory=Map)
    #: the grants with an ``irq-affinity`` annotation (by container id)
    irq: Map[ContainerID, None] = field(default_factory=Map)

    def need(self, index: int, *, extra: int = 0, sharer: bool = False) -> int:
        """Millicores pool `index` must keep on its shared set (module docstring).

        `extra` millicores and, with `sharer`, one more shared user are counted as if
        they lived in the pool: the need of a placement before it is made.
        """
        demand = self.demand[index] + extra
        sharers = self.sharers[index] > 0 or sharer
        return max(demand, 1) if sharers else demand


@dataclass(frozen=True, slots=True)
class TopologyAwareState(PolicyState):
    """The grants, with the supply they leave in `tree` (module docstring)."""

    grants: Map[ContainerID, Grant]
    #: the pool tree the supply is derived for; not part of the value
    tree: PoolTree = field(compare=False, repr=False)
    #: derived from `grants` and `tree` when the state is built; not part of the value
    supply: Supply = field(compare=False, repr=False)

    @classmethod
    def empty(cls, tree: PoolTree) -> TopologyAwareState:
        """The state with no grants."""
        return cls(grants=Map(), tree=tree, supply=supply_from_scratch(tree, ()))

    def with_grant(self, grant: Grant) -> TopologyAwareState:
        """This state with `grant` added (replacing the container's previous one)."""
        supply = self.supply
        old = self.grants.get(grant.container_id)
        if old is not None:
            supply = _adjust(self.tree, supply, old, -1)
        supply = _adjust(self.tree, supply, grant, 1)
        grants = self.grants.set(grant.container_id, grant)
        return TopologyAwareState(grants=grants, tree=self.tree, supply=supply)

    def without(self, cid: ContainerID) -> TopologyAwareState:
        """This state without the grant of `cid` (this state when it has none)."""
        old = self.grants.get(cid)
        if old is None:
            return self
        supply = _adjust(self.tree, self.supply, old, -1)
        return TopologyAwareState(grants=self.grants.delete(cid), tree=self.tree, supply=supply)


def supply_from_scratch(tree: PoolTree, grants: Iterable[Grant]) -> Supply:
    """The per-pool figures of `grants`, derived from every one of them."""
    grants = list(grants)
    used = union(g.exclusive for g in grants)
    n = len(tree.pools)
    own_demand = [0] * n
    own_memory = [0] * n
    population = [0] * n
    own_sharers = [0] * n
    own_zero = [0] * n
    reserved_demand = 0
    users: list[dict[ContainerID, None]] = [{} for _ in range(n)]
    subjects: dict[tuple[str, str], dict[ContainerID, None]] = {}
    irq: dict[ContainerID, None] = {}
    for g in grants:
        if g.request.irq_affinity is not None:
            irq[g.container_id] = None
        for item in g.request.subject.grouping() if g.request.subject is not None else ():
            subjects.setdefault(item, {})[g.container_id] = None
        if g.kind in SHARED_USERS:
            users[g.pool][g.container_id] = None
        own_demand[g.pool] += g.shared_milli
        own_memory[g.pool] += g.request.memory_bytes
        own_sharers[g.pool] += g.kind in SHARED_USERS
        own_zero[g.pool] += g.zero_request
        population[g.pool] += g.colocated
        reserved_demand += g.reserved_milli
    demand = [0] * n
    memory = [0] * n
    sharers = [0] * n
    zero = [0] * n
    for p in tree.pools:
        for a in tree.ancestors(p.index):
            demand[a] += own_demand[p.index]
            memory[a] += own_memory[p.index]
            sharers[a] += own_sharers[p.index]
            zero[a] += own_zero[p.index]
    return Supply(
        used=used,
        shared=tuple(p.sharable - used for p in tree.pools),
        demand=tuple(demand),
        memory=tuple(memory),
        population=tuple(population),
        sharers=tuple(sharers),
        reserved_demand=reserved_demand,
        zero_req=tuple(zero),
        holders=holders_of(g.exclusive for g in grants),
        users=tuple(Map(u) for u in users),
        subjects=Map({k: _holding(v) for k, v in subjects.items()}),
        irq=Map(irq),
    )


def _adjust(tree: PoolTree, supply: Supply, grant: Grant, sign: int) -> Supply:
    """`supply` with `grant` added (sign 1) or taken away (-1): its demand, memory,
    population and pool user; its exclusive CPUs' holders, and from those ``used`` and
    the shared sets of the pools its CPUs touch: the same figures `supply_from_scratch`
    would find, in O(pools + log containers)."""
    line = tree.ancestors(grant.pool)
    sharer = grant.kind in SHARED_USERS
    demand = _added(supply.demand, line, sign * grant.shared_milli)
    memory = _added(supply.memory, line, sign * grant.request.memory_bytes)
    sharers = _added(supply.sharers, line, sign * sharer)
    zero = _added(supply.zero_req, line, sign * grant.zero_request)
    population = _added(supply.population, (grant.pool,), sign * grant.colocated)
    users = supply.users
    if sharer:
        mine = users[grant.pool]
        mine = mine.set(grant.container_id, None) if sign > 0 else mine.delete(grant.container_id)
        users = (*users[: grant.pool], mine, *users[grant.pool + 1 :])
    shared = supply.shared
    used = supply.used
    holders = supply.holders
    if grant.exclusive:
        used, holders = hold(used, holders, grant.exclusive, sign)
        shared = tuple(
            p.sharable - used if not p.cpus.isdisjoint(grant.exclusive) else shared[p.index]
            for p in tree.pools
        )
    return Supply(
        used=used,
        shared=shared,
        demand=demand,
        memory=memory,
        population=population,
        sharers=sharers,
        reserved_demand=supply.reserved_demand + sign * grant.reserved_milli,
        zero_req=zero,
        holders=holders,
        users=users,
        subjects=_index_subject(supply.subjects, grant, sign),
        irq=_index_irq(supply.irq, grant, sign),
    )


def _added(figures: tuple[int, ...], where: Iterable[int], delta: int) -> tuple[int, ...]:
    """`figures` with `delta` added at each index of `where` (the same tuple for 0: most
    grants change few of the figures, e.g. a BestEffort one no demand)."""
    if not delta:
        return figures
    out = list(figures)
    for i in where:
        out[i] += delta
    return tuple(out)


def _index_irq(irq: Map[ContainerID, None], grant: Grant, sign: int) -> Map[ContainerID, None]:
    """`irq` with `grant` added (sign 1) or dropped (-1) when it has an ``irq-affinity``."""
    if grant.request.irq_affinity is None:
        return irq
    return irq.set(grant.container_id, None) if sign > 0 else irq.delete(grant.container_id)


def _index_subject(
    subjects: Map[tuple[str, str], Holding], grant: Grant, sign: int
) -> Map[tuple[str, str], Holding]:
    """`subjects` with `grant` added (sign 1) or dropped (-1) under each of its items."""
    subject = grant.request.subject
    if subject is None:
        return subjects
    cid = grant.container_id
    m = subjects.mutate()
    for item in subject.grouping():
        held = m.get(item)
        if sign > 0:
            if held is None:
                m[item] = (cid,)
            elif isinstance(held, tuple):
                m[item] = held if held[0] == cid else Map({held[0]: None, cid: None})
            else:
                m[item] = held.set(cid, None)
        elif held is None or (isinstance(held, tuple) and held[0] != cid):
            raise KeyError(cid)  # as a map's delete would: the grant was not indexed
        elif isinstance(held, tuple):
            del m[item]
        else:
            m[item] = _holding(held.delete(cid))
    return m.finish()


def _holding(ids: Mapping[ContainerID, None]) -> Holding:
    """The index entry of `ids` (one or more): a 1-tuple for one id (module docstring)."""
    if len(ids) == 1:
        return (next(iter(ids)),)
    return ids if isinstance(ids, Map) else Map(ids)
