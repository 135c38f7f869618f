"""Where a balloon's new CPUs come from and which ones it gives back: nri-plugins' CPU tree.

Theory of operation: the machine is a tree (`CPUTree`): system, packages, dies, NUMA
nodes, L2 caches, cores, threads; each node holds the online CPUs below it and a name
(``p0d0n0$2cpu4t5``, as nri-plugins spells them; names break ties).  With
``preferSpreadOnPhysicalCores`` every NUMA node is split under it into *classes* by
thread index (the first threads of its cores, the second threads, ...), so that the
deepest node with room is a set of threads on different cores.

Growing a balloon by `delta` CPUs (`grow`) narrows the free CPUs in steps, each of
which may only narrow them to a set still holding `delta` CPUs:

1. *hints* (`Hint`), in order: a set to be close to (the reserved cpuset for the
   reserved balloon, a ``preferCloseToDevices`` device, the isolated CPUs for
   ``preferIsolCpus``, a core type for ``preferCoreType``) keeps the free CPUs in it; a
   set to be far from (a ``preferFarFromDevices`` device, then the same sets, for every
   type that does not want them) keeps the free CPUs outside it; last, the CPUs under
   load (`TreeOptions.loads`): at each level the type's ``loads`` load, the domains of
   the CPUs of every balloon loading it, this one's included (`level_cpus`).  With
   ``overloadsLevelInBalloon`` (`TreeOptions.overloads`) the balloon takes its CPUs one
   at a time, the lowest of the narrowed set, each one loading its domains for the next;
2. the *local set*: the deepest tree node with at least `delta` free CPUs, the best by
   the sort key (smallest first), compared level by level from the root::

       (-depth,
        -(the balloon's CPUs under each ancestor, root first),
        free CPUs under each ancestor, root first   (negated when balancing),
        name)

   so a balloon grows where it already is, and then, with
   ``allocatorTopologyBalancing``, where most CPUs are free (spreading balloons), or
   else where fewest are (packing them); with ``preferSpreadOnPhysicalCores`` the
   local set is chosen one CPU at a time, so every CPU lands on the emptiest core;
3. the final pick: `delta` of those CPUs as nri-plugins' ``AllocateCpus`` picks them
   (`cpu_allocator.CPUAllocator`: idle packages, then idle last-level cache groups on
   machines whose caches split a die, then idle cores, then threads), with the type's
   ``allocatorPriority``.

Shrinking (`shrink`) gives back, one CPU at a time, the CPU whose key is the smallest::

       (-depth,
        the balloon's CPUs under each ancestor, root first,
        free CPUs under each ancestor, root first,
        name, last first)

after the CPUs that the fewest close-hints want (a CPU in the first hint outweighs one
in all the later ones).

The keys are not built for every node: `Levels` indexes the tree by depth, the deepest
depth with room is found by counting the CPUs per node of that depth only, and the
candidates there are narrowed one key component at a time, counting only their
ancestors (`_narrow`); a unit test checks this against the keys above, node by node.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from nri_resmgr.policy.balloons.spec import TopologyLevel
from nri_resmgr.policy.cpu_allocator import CPUAllocator
from nri_resmgr.topology.cpuset import CPUSet, IDSet, union
from nri_resmgr.topology.model import Topology

__all__ = [
    "CPUTree",
    "Hint",
    "Levels",
    "TreeNode",
    "TreeOptions",
    "grow",
    "level_cpus",
    "shrink",
]


@dataclass(frozen=True, slots=True)
class TreeNode:
    """One node of the CPU tree: its name, CPUs and children."""

    name: str
    cpus: frozenset[int]
    children: tuple[TreeNode, ...] = ()


@dataclass(frozen=True, slots=True)
class CPUTree:
    """The machine's CPU tree, plain and split by thread index under NUMA nodes."""

    plain: TreeNode
    split: TreeNode
    plain_levels: Levels
    split_levels: Levels
    #: the final pick's allocator (their ``cpuAllocator``)
    allocator: CPUAllocator

    @classmethod
    def of(cls, topology: Topology) -> CPUTree:
        plain = _build(topology)
        split = _split_threads(topology, plain)
        return cls(plain, split, Levels.of(plain), Levels.of(split), CPUAllocator.of(topology))

    def levels(self, spread: bool) -> Levels:
        return self.split_levels if spread else self.plain_levels


@dataclass(frozen=True, slots=True)
class Hint:
    """A set of CPUs a balloon type wants to be close to, or far from (`far`)."""

    cpus: CPUSet
    far: bool = False


@dataclass(frozen=True, slots=True)
class TreeOptions:
    """How one balloon type grows and shrinks (module docstring)."""

    balancing: bool = False
    spread: bool = False
    hints: tuple[Hint, ...] = ()
    #: the final pick's ``allocatorPriority`` (high, normal, low, none)
    priority: str = "none"
    #: the levels the type's ``loads`` put load on, each once, in order
    loads: tuple[TopologyLevel, ...] = ()
    #: a load class of the type ``overloadsLevelInBalloon``: CPUs one at a time
    overloads: bool = False


def level_cpus(topology: Topology, cpus: CPUSet, level: TopologyLevel) -> CPUSet:
    """The CPUs of the `level` domains (packages, ..., cores) `cpus` are in."""
    if level is TopologyLevel.SYSTEM:
        return topology.online_cpus()
    if not cpus:
        return IDSet()
    recs = [topology.cpu(c) for c in cpus]
    if level is TopologyLevel.PACKAGE:
        return union(topology.package_cpus(p) for p in {r.package_id for r in recs})
    if level is TopologyLevel.DIE:
        return union(topology.die_cpus(d) for d in {r.die_id for r in recs})
    if level is TopologyLevel.NUMA:
        return union(topology.node_cpus(n) for n in {r.node_id for r in recs})
    if level is TopologyLevel.L2CACHE:
        return union(topology.l2_cpus(i) for i in {r.l2_id for r in recs})
    return union(topology.core_cpus(i) for i in {r.core_id for r in recs})


def _build(topo: Topology) -> TreeNode:
    online = topo.online_cpus()

    def threads(core_name: str, cpus: list[int]) -> tuple[TreeNode, ...]:
        return tuple(TreeNode(f"{core_name}t{c}", frozenset({c})) for c in cpus)

    packages = []
    for pkg in topo.package_ids():
        pname = f"p{pkg}"
        dies = []
        for die in topo.die_ids(pkg):
            dname = f"{pname}d{die}"
            nodes = []
            for node in topo.node_ids(with_cpus=True):
                ncpus = topo.node_cpus(node) & topo.die_cpus(die) & online
                if not ncpus:
                    continue
                nname = f"{dname}n{node}"
                l2s = sorted({topo.cpu(c).l2_id for c in ncpus})
                caches = []
                for l2 in l2s:
                    lname = f"{nname}${l2}"
                    cores = []
                    seen: set[int] = set()
                    for c in (topo.l2_cpus(l2) & online).sorted():
                        if c in seen:
                            continue
                        sibs = topo.siblings(c).sorted()
                        seen.update(sibs)
                        cname = f"{nname}cpu{c}"
                        cores.append(TreeNode(cname, frozenset(sibs), threads(cname, sibs)))
                    caches.append(TreeNode(lname, _union(cores), tuple(cores)))
                nodes.append(TreeNode(nname, _union(caches), tuple(caches)))
            if nodes:
                dies.append(TreeNode(dname, _union(nodes), tuple(nodes)))
        if dies:
            packages.append(TreeNode(pname, _union(dies), tuple(dies)))
    return TreeNode("system", _union(packages), tuple(packages))


def _union(nodes: Sequence[TreeNode]) -> frozenset[int]:
    return frozenset().union(*(n.cpus for n in nodes))


def _mask(node: TreeNode, keep: frozenset[int]) -> TreeNode | None:
    cpus = node.cpus & keep
    if not cpus:
        return None
    kids = tuple(k for k in (_mask(c, keep) for c in node.children) if k is not None)
    return TreeNode(node.name, cpus, kids)


def _split_threads(topo: Topology, root: TreeNode) -> TreeNode:
    """`root` with the children of each NUMA node (depth 3) regrouped by thread index."""
    index = {}
    for cpus in topo.cores_of(topo.online_cpus()).values():
        for i, c in enumerate(cpus.sorted()):
            index[c] = i

    def walk(node: TreeNode, depth: int) -> TreeNode:
        if depth < 3:
            return TreeNode(node.name, node.cpus, tuple(walk(c, depth + 1) for c in node.children))
        classes = []
        for k in sorted({index[c] for c in node.cpus}):
            keep = frozenset(c for c in node.cpus if index[c] == k)
            kids = tuple(m for m in (_mask(c, keep) for c in node.children) if m is not None)
            classes.append(TreeNode(f"{node.name}class{k}", keep, kids))
        return TreeNode(node.name, node.cpus, tuple(classes))

    return walk(root, 0)


# ---- the local set ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Levels:
    """A CPU tree by depth, for counting: the nodes of each depth (all leaves, threads,
    are at the same depth), their names and CPUs, and each node's ancestors."""

    names: tuple[tuple[str, ...], ...]
    cpus: tuple[tuple[frozenset[int], ...], ...]
    #: per depth, per node: the index of its ancestor at each depth 0..itself
    paths: tuple[tuple[tuple[int, ...], ...], ...]
    #: CPU -> the index of the node holding it at each depth
    owners: Mapping[int, tuple[int, ...]]

    @classmethod
    def of(cls, root: TreeNode) -> Levels:
        names: list[list[str]] = []
        cpus: list[list[frozenset[int]]] = []
        paths: list[list[tuple[int, ...]]] = []
        owners: dict[int, tuple[int, ...]] = {}

        def walk(node: TreeNode, path: tuple[int, ...]) -> None:
            depth = len(path)
            if depth == len(names):
                names.append([])
                cpus.append([])
                paths.append([])
            path = (*path, len(names[depth]))
            names[depth].append(node.name)
            cpus[depth].append(node.cpus)
            paths[depth].append(path)
            if not node.children:
                for c in node.cpus:
                    owners[c] = path
            for child in node.children:
                walk(child, path)

        walk(root, ())
        return cls(
            names=tuple(map(tuple, names)),
            cpus=tuple(map(tuple, cpus)),
            paths=tuple(map(tuple, paths)),
            owners=owners,
        )


def _deepest(levels: Levels, cpus: CPUSet, need: int) -> tuple[int, list[int]] | None:
    """The deepest depth with nodes holding at least `need` of `cpus`, and those nodes."""
    owners = levels.owners
    held = [owners[c] for c in cpus if c in owners]
    for depth in range(len(levels.names) - 1, -1, -1):
        counts = Counter(path[depth] for path in held)
        cands = sorted(n for n, k in counts.items() if k >= need)
        if cands:
            return depth, cands
    return None


def _narrow(levels: Levels, depth: int, cands: list[int], cpus: CPUSet, sign: int) -> list[int]:
    """The nodes of `cands` (at `depth`) whose ancestors hold the fewest of `cpus` (sign
    1) or the most (sign -1), compared root first: one component of the sort key."""
    ids = cpus.ids()
    if not ids:
        return cands  # every count is 0: no node is better than another
    paths = levels.paths[depth]
    for d in range(depth + 1):
        ancestors = {paths[i][d] for i in cands}
        if len(ancestors) == 1:
            continue
        value = {n: sign * len(levels.cpus[d][n] & ids) for n in ancestors}
        low = min(value.values())
        cands = [i for i in cands if value[paths[i][d]] == low]
    return cands


def _local_add(
    levels: Levels, current: CPUSet, free: CPUSet, delta: int, balancing: bool
) -> CPUSet:
    """The free CPUs of the best node to take `delta` CPUs from (module docstring)."""
    found = _deepest(levels, free, delta)
    if found is None:
        return free
    depth, cands = found
    cands = _narrow(levels, depth, cands, current, -1)
    cands = _narrow(levels, depth, cands, free, -1 if balancing else 1)
    best = min(cands, key=lambda i: levels.names[depth][i])
    return IDSet(levels.cpus[depth][best] & free.ids())


def _local_remove(levels: Levels, current: CPUSet, free: CPUSet, count: int) -> CPUSet:
    """The current CPUs of the best node to give `count` CPUs back from."""
    found = _deepest(levels, current, count)
    if found is None:
        return current
    depth, cands = found
    cands = _narrow(levels, depth, cands, current, 1)
    cands = _narrow(levels, depth, cands, free, 1)
    # the name breaks ties last first
    best = max(cands, key=lambda i: levels.names[depth][i])
    return IDSet(levels.cpus[depth][best] & current.ids())


# ---- the resizer chain ---------------------------------------------------------------


def _one_at_a_time(
    levels: Levels, current: CPUSet, free: CPUSet, delta: int, opts: TreeOptions
) -> CPUSet:
    """Growing: the local set, or with spread one CPU at a time.  Shrinking: the CPUs
    to give back, one at a time."""
    if delta > 0:
        superset = _local_add(levels, current, free, delta, opts.balancing)
        if not opts.spread or len(superset) == delta:
            return superset
        added = IDSet()
        for _ in range(delta):
            one = _local_add(levels, current | added, free - added, 1, opts.balancing)
            if len(one) != 1:
                return superset
            added = added | one
        return added
    removed = IDSet()
    for _ in range(-delta):
        one = _local_remove(levels, current - removed, free | removed, 1)
        removed = removed | IDSet(sorted(one)[:1])
    return removed


def _close_sets(hints: Sequence[Hint], free: CPUSet) -> list[CPUSet]:
    return [free - h.cpus if h.far else h.cpus for h in hints]


def _add_from(
    tree: CPUTree,
    current: CPUSet,
    free: CPUSet,
    delta: int,
    opts: TreeOptions,
    loaded: Sequence[Hint],
) -> CPUSet:
    if len(free) <= delta:
        return free
    for want in _close_sets((*opts.hints, *loaded), free):
        narrowed = free & want
        if len(narrowed) >= delta:
            free = narrowed
    if len(free) == delta:
        return free
    return _one_at_a_time(tree.levels(opts.spread), current, free, delta, opts)


def _remove_from(
    tree: CPUTree, current: CPUSet, free: CPUSet, count: int, opts: TreeOptions
) -> CPUSet:
    if count >= len(current):
        return current
    levels = tree.levels(opts.spread)
    sets = _close_sets(opts.hints, free)
    if not sets:
        return _one_at_a_time(levels, current, free, -count, opts)
    # CPUs wanted by fewer (and later) close hints go first
    weight = {
        c: sum(1 << (len(sets) - 1 - i) for i, s in enumerate(sets) if c in s) for c in current
    }
    order = sorted(current, key=lambda c: (weight[c], c))
    bar = weight[order[count]]
    sure = IDSet(c for c in order if weight[c] < bar)
    maybe = IDSet(c for c in order if weight[c] == bar)
    more = _one_at_a_time(levels, maybe, free, -(count - len(sure)), opts)
    return sure | IDSet(sorted(more)[: count - len(sure)])


def _loaded(
    topology: Topology, opts: TreeOptions, loaded: Mapping[TopologyLevel, CPUSet], cpus: CPUSet
) -> tuple[Hint, ...]:
    """Far hints from the CPUs under load at the type's load levels: the domains of the
    CPUs `loaded` there and of the balloon's own `cpus`."""
    return tuple(
        Hint(level_cpus(topology, loaded.get(level, IDSet()) | cpus, level), far=True)
        for level in opts.loads
    )


def grow(
    topology: Topology,
    tree: CPUTree,
    *,
    current: CPUSet,
    free: CPUSet,
    delta: int,
    opts: TreeOptions,
    loaded: Mapping[TopologyLevel, CPUSet] | None = None,
) -> CPUSet | None:
    """`delta` CPUs out of `free` for a balloon holding `current`; None if too few.

    `loaded`: level -> the CPUs of the balloons whose types load it (`TreeOptions.loads`).
    """
    if delta <= 0:
        return IDSet()
    if len(free) < delta:
        return None
    load = loaded or {}
    if not (opts.overloads and opts.loads):
        pool = _add_from(tree, current, free, delta, opts, _loaded(topology, opts, load, current))
        got = tree.allocator.allocate(pool, delta, priority=opts.priority)
        assert got is not None  # the pool holds at least delta
        return got
    # every CPU taken loads its domains: the next one is chosen knowing them
    added = IDSet()
    pool = _add_from(tree, current, free, delta, opts, _loaded(topology, opts, load, current))
    while True:
        added = added | IDSet([min(pool)])
        if len(added) == delta:
            return added
        mine = current | added
        pool = _add_from(tree, mine, free - added, 1, opts, _loaded(topology, opts, load, mine))


def shrink(
    topology: Topology,
    tree: CPUTree,
    *,
    current: CPUSet,
    free: CPUSet,
    count: int,
    opts: TreeOptions,
) -> CPUSet:
    """The `count` CPUs of `current` a balloon gives back (free: the CPUs in no balloon)."""
    if count <= 0:
        return IDSet()
    pool = _remove_from(tree, current, free, count, opts)
    if len(pool) <= count:
        return pool
    keep = tree.allocator.allocate(pool, len(pool) - count, priority=opts.priority)
    assert keep is not None  # fewer than len(pool)
    return pool - keep
