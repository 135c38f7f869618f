"""The pool tree: the machine cut along the topology levels that actually split it.

Theory of operation: the root pool is the whole machine (the CPUs the policy may use).
Below it come packages, then dies, then NUMA nodes, then L3 cache groups, but a level
is only added where it splits its parent: one package with one die and two NUMA nodes
gives ``root -> node0, node1``; a single-node desktop is a single pool ``root``.  Each
pool is the union of its children and siblings are disjoint (nri-plugins' pools.go
builds the same shape, including L3 pools for AMD CCX parts).

Every pool carries four CPU sets, all fixed at construction:

- ``cpus``: every usable CPU in its subtree;
- ``isolated``: those the kernel isolates (``isolcpus``) and that are not reserved;
- ``reserved``: those reserved for system work;
- ``sharable``: ``cpus - isolated - reserved``, the pool's shared set when nothing is
  held exclusively.  Exclusive grants slice CPUs off it (see `supply`).

and its memory: for each memory kind, the NUMA nodes of that kind local to its CPU nodes,
including CPU-less PMEM/HBM/CXL nodes attached to their closest CPU nodes (`local_mems`:
every CPU node at the smallest distance, as nri-plugins' ``getClosestSpecialMem``
attaches one to each of its ``ClosestNodes``, so two packages equally near a node both
own it), with their total size.  The memory a pinned container
is given (`Pool.offer_mems_of`) is that of its kinds, widened as nri-plugins' memory
allocator widens its initial zone (libmem ``findInitialZone``): for each kind the
machine has and the pool lacks, the nearest nodes of that kind (`widen_zone`).

Pools are numbered in breadth-first order (root 0), and carry nri-plugins' number too
(`Pool.their_id`, post-order: leaves first, the root last), the final tie-break of the
pool sort key; ``depth`` (root 0) says how tight a pool is.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field, replace
from itertools import combinations

from nri_resmgr.model import MemoryKind
from nri_resmgr.topology.cpuset import CPUSet, IDSet, NodeSet, union
from nri_resmgr.topology.model import Topology

__all__ = ["TOPOLOGY_LEVELS", "Pool", "PoolTree", "build_pool_tree", "local_mems", "widen_zone"]

#: nri-plugins' CPU topology levels of pools, outermost first (``unlimitedBurstable``)
TOPOLOGY_LEVELS = ("system", "package", "die", "numa", "l3cache")
_LEVEL_OF_PREFIX = {"package": "package", "die": "die", "node": "numa", "l3-": "l3cache"}


@dataclass(frozen=True, slots=True)
class Pool:
    index: int
    name: str
    depth: int
    parent: int | None
    children: tuple[int, ...]
    cpus: CPUSet
    isolated: CPUSet
    reserved: CPUSet
    sharable: CPUSet
    mems: Mapping[MemoryKind, NodeSet]
    memory_bytes: Mapping[MemoryKind, int]
    #: `mems_of` for every combination of memory kinds, computed once by `build_pool_tree`
    #: (a decision renders every container it touches, and each rendering asks for its
    #: pool's nodes: the union is built once per pool, not once per container)
    mems_by_kinds: Mapping[frozenset[MemoryKind], NodeSet] = field(
        default_factory=dict, compare=False, repr=False
    )
    #: the topology level of the pool, in nri-plugins' words (`TOPOLOGY_LEVELS`)
    level: str = "system"
    #: `offer_mems_of` for every combination of memory kinds, like `mems_by_kinds`
    offer_mems_by_kinds: Mapping[frozenset[MemoryKind], NodeSet] = field(
        default_factory=dict, compare=False, repr=False
    )
    #: nri-plugins' id of the pool: its number in a post-order walk (children first, in
    #: order, then the pool; the root last), as their ``enumeratePools`` numbers them
    their_id: int = 0

    def mems_of(self, kinds: Collection[MemoryKind]) -> NodeSet:
        """The pool's memory nodes of the given kinds."""
        key = kinds if isinstance(kinds, frozenset) else frozenset(kinds)
        found = self.mems_by_kinds.get(key)
        if found is not None:
            return found
        return _mems_union(self.mems, key)

    def offer_mems_of(self, kinds: Collection[MemoryKind]) -> NodeSet:
        """The memory nodes a container of these kinds gets here: `mems_of` widened by
        the nearest nodes of each kind the pool lacks (`widen_zone`)."""
        key = kinds if isinstance(kinds, frozenset) else frozenset(kinds)
        found = self.offer_mems_by_kinds.get(key)
        return found if found is not None else self.mems_of(key)

    def memory_of(self, kinds: Collection[MemoryKind]) -> int:
        """Bytes of memory of the given kinds."""
        return sum(self.memory_bytes.get(k, 0) for k in kinds)


@dataclass(frozen=True, slots=True)
class PoolTree:
    pools: tuple[Pool, ...]
    reserved: CPUSet
    #: the deepest pool holding every reserved CPU (where reserved containers live)
    reserved_pool: int
    #: millicores reserved containers may request in all: ``reservedResources.cpu``
    #: as a quantity (``750m`` is 750m on one CPU, nri-plugins #632), else 1000 per CPU
    reserved_milli: int = 0
    #: the topology levels some pool is at (`existing_level` reads it per decision)
    levels: frozenset[str] = frozenset({"system"})
    #: `scoring.memory_key`'s fixed terms by (pool index, memory kinds), for every pool
    #: and combination of kinds: (bytes, nodes offered, 1 when the pool lacks a kind the
    #: machine has); every decision ranks every pool.  Made with the tree, so that a
    #: decision never writes into the tree of the state it is given
    memory_terms: Mapping[tuple[int, frozenset[MemoryKind]], tuple[int, int, int]] = field(
        init=False, compare=False, repr=False
    )
    #: each pool's index and its ancestors' up to the root (`ancestors`), made with the
    #: tree: a decision asks for several lines and every grant added or dropped for one
    lines: tuple[tuple[int, ...], ...] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        lines = []
        for pool in self.pools:
            line = []
            cur: int | None = pool.index
            while cur is not None:
                line.append(cur)
                cur = self.pools[cur].parent
            lines.append(tuple(line))
        object.__setattr__(self, "lines", tuple(lines))
        terms = {}
        for n in range(len(MemoryKind) + 1):
            for combo in combinations(MemoryKind, n):
                kinds = frozenset(combo)
                wanted = {k for k in kinds if self.root.mems.get(k)}
                for pool in self.pools:
                    missing = sum(not pool.mems.get(k) for k in wanted)
                    terms[pool.index, kinds] = (
                        pool.memory_of(kinds),
                        len(pool.offer_mems_of(kinds)),
                        int(missing > 0),
                    )
        object.__setattr__(self, "memory_terms", terms)

    @property
    def root(self) -> Pool:
        return self.pools[0]

    def __iter__(self) -> Iterator[Pool]:
        return iter(self.pools)

    def by_name(self, name: str) -> Pool:
        for p in self.pools:
            if p.name == name:
                return p
        raise KeyError(name)

    def ancestors(self, index: int) -> tuple[int, ...]:
        """`index` and its ancestors, up to the root."""
        return self.lines[index]

    def subtree(self, index: int) -> list[int]:
        """`index` and all its descendants."""
        out = [index]
        for child in self.pools[index].children:
            out.extend(self.subtree(child))
        return out

    def existing_level(self, level: str) -> str:
        """`level` if some pool is at it, else the next level out that has pools.

        nri-plugins' ``findExistingTopologyLevel``: ``die`` on a machine without die
        pools is ``package`` (or ``system`` on a single-package machine).
        """
        rank = TOPOLOGY_LEVELS.index(level)
        return next(lv for lv in reversed(TOPOLOGY_LEVELS[: rank + 1]) if lv in self.levels)

    def deepest_containing(self, cpus: CPUSet) -> list[int]:
        """Pools whose CPUs include all of `cpus`, deepest first."""
        found = [p for p in self.pools if cpus <= p.cpus]
        return [p.index for p in sorted(found, key=lambda p: (-p.depth, p.index))]


def _mems_union(mems: Mapping[MemoryKind, NodeSet], kinds: Collection[MemoryKind]) -> NodeSet:
    return union(mems.get(k, IDSet()) for k in kinds)


def _all_mems_of(mems: Mapping[MemoryKind, NodeSet]) -> dict[frozenset[MemoryKind], NodeSet]:
    """`Pool.mems_of` for each of the 2**len(MemoryKind) combinations of kinds."""
    kinds = tuple(MemoryKind)
    return {
        frozenset(combo): _mems_union(mems, combo)
        for size in range(len(kinds) + 1)
        for combo in combinations(kinds, size)
    }


def _number_post_order(pools: list[Pool]) -> list[Pool]:
    """`pools` with `Pool.their_id` set: nri-plugins' ``enumeratePools`` numbers its pools
    by ``DepthFirst``, which visits the children before the pool itself."""
    ids: dict[int, int] = {}

    def walk(i: int) -> None:
        for c in pools[i].children:
            walk(c)
        ids[i] = len(ids)

    if pools:
        walk(0)
    return [replace(p, their_id=ids[p.index]) for p in pools]


def local_mems(topology: Topology, cpu_nodes: NodeSet, kind: MemoryKind) -> NodeSet:
    """The memory of `kind` a pool on CPU nodes `cpu_nodes` owns: those of them of that
    kind, and every CPU-less node of it one of whose nearest CPU nodes is among them.

    nri-plugins' ``getClosestSpecialMem`` (pools.go) attaches a CPU-less node to every
    node of the closest distance group ``ClosestNodes`` returns, ties included, where
    `Topology.closest_cpu_node` names one (the lower id): on a machine whose distance
    table puts a PMEM node as near two packages, both own it there, so a container's
    memory offer and the "matching memory type" rule see it in both (parity/s8c4k).
    """
    out = {n for n in cpu_nodes if topology.node(n).kind is kind}
    cpu_all = topology.node_ids(with_cpus=True)
    if not cpu_all:
        return IDSet(out)
    for n in topology.node_ids(with_cpus=False):
        if topology.node(n).kind is not kind:
            continue
        nearest = min(topology.distance(n, c) for c in cpu_all)
        if any(topology.distance(n, c) == nearest for c in cpu_nodes):
            out.add(n)
    return IDSet(out)


def widen_zone(topology: Topology, zone: NodeSet, kinds: Collection[MemoryKind]) -> NodeSet:
    """`zone` with, for each of `kinds` the machine has and `zone` lacks, the nearest
    nodes of that kind: nri-plugins' libmem ``findInitialZone`` through its
    ``defaultExpand``.  Their nearest nodes are found walking `zone` by node id, each
    node's closest nodes of the kind added while their distance is no more than the
    closest seen so far (so a later, closer node adds to an earlier one's, as theirs).
    """
    added: set[int] = set()
    for kind in kinds:
        of_kind = topology.nodes_of_kind(kind)
        if not of_kind or zone & of_kind:
            continue
        best: int | None = None
        for n in sorted(zone):
            dist = {m: topology.distance(n, m) for m in of_kind}
            nearest = min(dist.values())
            if best is None or nearest <= best:
                best = nearest
                added.update(m for m, d in dist.items() if d == nearest)
    return zone | IDSet(added)


def _all_offer_mems_of(
    topology: Topology, by_kinds: Mapping[frozenset[MemoryKind], NodeSet]
) -> dict[frozenset[MemoryKind], NodeSet]:
    """`Pool.offer_mems_of` for each combination of kinds (`widen_zone` of `by_kinds`)."""
    return {kinds: widen_zone(topology, zone, kinds) for kinds, zone in by_kinds.items()}


def _levels(topology: Topology) -> list[tuple[str, Callable[[int], int]]]:
    """The splitting levels below the root: (name prefix, key of a CPU at that level)."""
    return [
        ("package", lambda c: topology.cpu(c).package_id),
        ("die", lambda c: topology.cpu(c).die_id),
        ("node", lambda c: topology.cpu(c).node_id),
        ("l3-", lambda c: topology.cpu(c).l3_id),
    ]


def build_pool_tree(
    topology: Topology, *, available: CPUSet, reserved: CPUSet, reserved_milli: int | None = None
) -> PoolTree:
    """The pool tree for the CPUs in `available` (see the module docstring).

    `reserved_milli` is the reserved capacity; by default 1000 per reserved CPU.
    """
    isolated_all = topology.isolated_cpus() - reserved
    levels = _levels(topology)
    kinds = tuple(MemoryKind)

    # (name, depth, parent, cpus), breadth first; the level of each by its prefix
    specs: list[tuple[str, int, int | None, CPUSet]] = [("root", 0, None, available)]
    levels_of: list[str] = ["system"]
    level_of: list[int] = [0]
    i = 0
    while i < len(specs):
        _, depth, _, cpus = specs[i]
        level = level_of[i]
        # descend past levels that do not split this pool
        while level < len(levels):
            prefix, key = levels[level]
            groups: dict[int, set[int]] = {}
            for c in cpus:
                groups.setdefault(key(c), set()).add(c)
            level += 1
            if len(groups) > 1:
                for gid, members in sorted(groups.items()):
                    specs.append((f"{prefix}{gid}", depth + 1, i, IDSet(members)))
                    level_of.append(level)
                    levels_of.append(_LEVEL_OF_PREFIX[prefix])
                break
        i += 1

    children: dict[int, list[int]] = {}
    for idx, (_, _, parent, _) in enumerate(specs):
        if parent is not None:
            children.setdefault(parent, []).append(idx)

    pools = []
    for idx, (name, depth, parent, cpus) in enumerate(specs):
        mems: dict[MemoryKind, NodeSet] = {}
        for kind in kinds:
            nodes = local_mems(topology, topology.nodes_of(cpus), kind)
            if nodes:
                mems[kind] = nodes
        by_kinds = _all_mems_of(mems)
        pools.append(
            Pool(
                index=idx,
                name=name,
                depth=depth,
                parent=parent,
                children=tuple(children.get(idx, ())),
                cpus=cpus,
                isolated=cpus & isolated_all,
                reserved=cpus & reserved,
                sharable=cpus - isolated_all - reserved,
                mems=mems,
                memory_bytes={k: topology.node_memory(v) for k, v in mems.items()},
                mems_by_kinds=by_kinds,
                level=levels_of[idx],
                offer_mems_by_kinds=_all_offer_mems_of(topology, by_kinds),
            )
        )
    pools = _number_post_order(pools)
    holders = [p for p in pools if reserved <= p.cpus]
    reserved_pool = max(holders, key=lambda p: (p.depth, -p.index)).index
    return PoolTree(
        pools=tuple(pools),
        reserved=reserved,
        reserved_pool=reserved_pool,
        reserved_milli=1000 * len(reserved) if reserved_milli is None else reserved_milli,
        levels=frozenset(p.level for p in pools),
    )
