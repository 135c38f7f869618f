"""nri-plugins' CPU allocator: which CPUs of a set to take, as their ``pkg/cpuallocator``.

Theory of operation: nri-plugins' topology-aware policy picks every set of exclusive
CPUs, and every set of CPUs a pool may give up (``SliceableCPUs``), with one allocator
(``cpuallocator.AllocateCpus``).  Placements equal to theirs need the same picks, so
this module follows it step for step (their function names in brackets):

1. all of `available` when it holds exactly `count` CPUs, nothing when fewer;
2. whole idle packages, those with more CPUs of the preferred priority first, then by
   id (``takeIdlePackages``); a package is idle when all its CPUs (of that priority)
   are available;
3. last-level cache groups (``takeCacheGroups``), only for two or more CPUs and only
   on machines where some cache level splits a die (AMD CCX parts, E-core clusters):
   idle groups first, tightest fitting die then package, the last one split by whole
   cores; then partly used groups of the chosen package;
4. whole idle cores, by preferred priority then lowest thread id (``takeIdleCores``);
5. single threads (``takeIdleThreads``): from the package already holding most of the
   result, then by priority, then the lowest package; inside it by priority, then the
   threads whose core has the fewest available threads (so a core already broken is
   finished before an idle one is broken: the *sibling preference*), then by id.

Priorities (``high``, ``normal``, ``low``; ``none`` prefers nothing: the values of
`topology_aware.priority.CPUPriority`, a string enum) rank CPU sets by ``cmpCPUSet``:
more CPUs of the preferred class, then of the classes below it, fewer of those above.
Their idle CPU clusters (``takeIdleClusters``) only act on hybrid machines, by the
kernel's cluster ids, which our topology model does not carry: on those machines the
step is left out (a named difference in docs/policies.md).

The allocator is built once per machine (`CPUAllocator`, their ``topologyCache``) and
is pure: `CPUAllocator.allocate` returns the CPUs it takes, or None when it cannot take
`count` of them.
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from nri_resmgr.topology.cpuset import CPUSet, IDSet
from nri_resmgr.topology.model import CoreType, Topology

__all__ = ["CPUAllocator", "CacheGroup"]

#: their priority order: high, normal, low (then none, which prefers nothing)
_ORDER = ("high", "normal", "low")
NONE = "none"
LOW = "low"


@dataclass(frozen=True, slots=True)
class CacheGroup:
    """CPUs sharing the cache level that splits dies (their ``cacheGroup``)."""

    index: int
    package: int
    die: int
    node: int
    cpus: CPUSet
    efficient: bool


def _grouping_level(topology: Topology) -> Callable[[int], CPUSet] | None:
    """The cache level that groups CPUs usefully (``pickCacheLevelForGrouping``): for the
    first CPU that has one, the outermost of L3, L2 whose CPUs are neither one CPU, nor
    its core, nor its die, nor its package; None when no level does.

    Whether a cache's CPUs group usefully depends on that set alone (a CPU of the set has
    the same core, die and package sets as every other CPU the set would equal), so each
    cache is looked at once, at its first CPU: on a machine where no level groups (most
    servers) that is one set operation per cache instead of two per CPU, at every
    pipeline build (twice before a pre-registered daemon synchronizes)."""
    online = topology.online_cpus()
    levels: tuple[Callable[[int], CPUSet], ...] = (
        lambda c: topology.l3_cpus(topology.cpu(c).l3_id),
        lambda c: topology.l2_cpus(topology.cpu(c).l2_id),
    )
    seen: tuple[set[int], set[int]] = (set(), set())
    for cpu in online:
        rec = topology.cpu(cpu)
        for level, cache, looked in zip(levels, (rec.l3_id, rec.l2_id), seen, strict=True):
            if cache in looked:
                continue
            looked.add(cache)
            cpus = level(cpu) & online
            if len(cpus) <= 1 or cpus in (
                topology.siblings(cpu),
                topology.die_cpus(rec.die_id),
                topology.package_cpus(rec.package_id),
            ):
                continue
            return level
    return None


def _cache_groups(topology: Topology) -> tuple[CacheGroup, ...]:
    """The machine's cache groups, numbered by package, die, node, lowest CPU
    (``discoverCacheGroups``); none when a group would span packages or nodes."""
    level = _grouping_level(topology)
    if level is None:
        return ()
    online = topology.online_cpus()
    found: list[tuple[int, int, int, CPUSet, bool]] = []
    for pkg in topology.package_ids():
        groups = []
        assigned: set[int] = set()
        for cpu in topology.package_cpus(pkg):
            if cpu in assigned:
                continue
            rec = topology.cpu(cpu)
            cpus = level(cpu) & online
            if len(cpus) <= 1 or cpus in (
                topology.siblings(cpu),
                topology.die_cpus(rec.die_id),
                topology.package_cpus(pkg),
            ):
                continue
            efficient = rec.core_type == CoreType.EFFICIENT
            groups.append((rec.package_id, rec.die_id, rec.node_id, cpus, efficient))
            assigned |= cpus.ids()
        if len(groups) > 1:
            found.extend(groups)
    by_die = True
    ordered = sorted(found, key=lambda g: (g[0], g[1], g[2], g[3].sorted()[0]))
    for pkg, die, node, cpus, _ in ordered:
        for cpu in cpus:
            rec = topology.cpu(cpu)
            if rec.package_id != pkg:
                return ()
            if rec.die_id != die:
                by_die = False
                break
            if rec.node_id != node:
                return ()
    if not by_die:
        ordered = sorted(found, key=lambda g: (g[0], g[2], g[3].sorted()[0]))
    return tuple(
        CacheGroup(index=i, package=p, die=d, node=n, cpus=c, efficient=e)
        for i, (p, d, n, c, e) in enumerate(ordered)
    )


class CPUAllocator:
    """nri-plugins' CPU allocator for one machine (module docstring)."""

    def __init__(
        self, topology: Topology, *, high: CPUSet, normal: CPUSet, low: CPUSet, hybrid: bool
    ) -> None:
        self.topology = topology
        #: the machine has P- and E-cores (cache groups of the other kind are skipped)
        self.hybrid = hybrid
        #: their ``cpuPriorities``: high, normal, low
        self.classes: tuple[CPUSet, CPUSet, CPUSet] = (high, normal, low)
        self.packages: dict[int, CPUSet] = {
            p: topology.package_cpus(p) for p in topology.package_ids()
        }
        self.cache_groups = _cache_groups(topology)
        #: each online CPU's core, once: an allocation asks for every free CPU's (four
        #: calls through the topology each; a Synchronize of 1,000 asked 8,750 times)
        self.cores = {cpu: topology.siblings(cpu) for cpu in topology.online_cpus()}

    def siblings(self, cpu: int) -> CPUSet:
        """`Topology.siblings` of `cpu` (from `cores` when online)."""
        found = self.cores.get(cpu)
        return found if found is not None else self.topology.siblings(cpu)

    @classmethod
    def of(cls, topology: Topology) -> CPUAllocator:
        """The allocator of `topology` with their ``cpuPriorities``: on a hybrid machine
        P-cores high, all but E-cores normal, E-cores low; elsewhere every online CPU
        normal."""
        efficient = topology.core_type_cpus(CoreType.EFFICIENT)
        online = topology.online_cpus()
        if not efficient:
            return cls(topology, high=IDSet(), normal=online, low=IDSet(), hybrid=False)
        return cls(
            topology,
            high=topology.core_type_cpus(CoreType.PERFORMANCE),
            normal=online - efficient,
            low=efficient,
            hybrid=True,
        )

    def allocate(self, available: CPUSet, count: int, *, priority: str = NONE) -> CPUSet | None:
        """`count` CPUs of `available` as nri-plugins' ``AllocateCpus`` picks them, or
        None when `available` holds fewer."""
        if len(available) < count:
            return None
        if len(available) == count:
            return available
        if count <= 0:
            return IDSet()
        return _Pick(self, available, count, priority).run(cache_groups=True)

    def compare(self, a: CPUSet, b: CPUSet, prefer: str, count: int) -> int:
        """Their ``cmpCPUSet``: > 0 when `a` suits `prefer` better, < 0 when `b` does."""
        if prefer not in _ORDER:
            return 0
        c = self.classes
        rank = _ORDER.index(prefer)
        if count > 0 and prefer in ("low", "high"):
            pa, pb = len(a & c[rank]), len(b & c[rank])
            if prefer == "high" and pa == 0 and pb == 0:
                pa, pb = len(a & c[1]), len(b & c[1])
            if pa >= count and pb >= count:
                return pb - pa
            if pa >= count or pb >= count:
                return pa - pb
        for r in range(rank, len(_ORDER)):
            pa, pb = len(a & c[r]), len(b & c[r])
            if count > 0 and r == rank and pa >= count and pb >= count:
                return pb - pa
            if pa != pb:
                return pa - pb
        for r in range(rank):
            na, nb = len(a & c[r]), len(b & c[r])
            if na != nb:
                return nb - na
        return 0


class _Pick:
    """One allocation in progress (their ``allocatorHelper``): `free` shrinks as
    `taken` grows, until `count` more are needed no longer."""

    def __init__(self, alloc: CPUAllocator, available: CPUSet, count: int, prefer: str) -> None:
        self.alloc = alloc
        self.topology = alloc.topology
        self.free = set(available)
        self.taken: set[int] = set()
        self.count = count
        self.prefer = prefer

    def take(self, cpus: CPUSet | set[int]) -> None:
        self.taken |= set(cpus)
        self.free -= set(cpus)
        self.count -= len(cpus)

    def run(self, *, cache_groups: bool) -> CPUSet | None:
        if cache_groups:
            self.idle_packages()
            if self.count > 0:
                self.cache_groups()
        if self.count > 0:
            self.idle_cores()
        if self.count > 0:
            self.idle_threads()
        return IDSet(self.taken) if self.count == 0 else None

    def _of_priority(self, cpus: CPUSet) -> CPUSet:
        if self.prefer not in _ORDER:
            return cpus
        return cpus & self.alloc.classes[_ORDER.index(self.prefer)]

    def by_preference(self, sets: Mapping[int, CPUSet]) -> list[int]:
        """The ids of `sets`, best first by `CPUAllocator.compare` (count -1), then
        lowest (their sort in ``takeIdlePackages`` and ``takeIdleCores``).  With no
        priority preferred, compare is 0 for any two sets and the order is the ids'
        alone: sorted without comparing (sorting a 224-thread machine's 100 free cores
        by the comparison was most of slicing a pool's CPUs)."""
        if self.prefer not in _ORDER:
            return sorted(sets)
        return self.ranked(sets)

    def ranked(self, sets: Mapping[int, CPUSet]) -> list[int]:
        """`by_preference` by the comparison, pair by pair."""
        alloc = self.alloc

        def cmp(a: int, b: int) -> int:
            res = alloc.compare(sets[a], sets[b], self.prefer, -1)
            return -res if res else a - b

        return sorted(sets, key=functools.cmp_to_key(cmp))

    def idle_packages(self) -> None:
        """``takeIdlePackages``."""
        alloc = self.alloc
        idle = {
            p: cpus
            for p, cpus in alloc.packages.items()
            if self._of_priority(cpus).ids() <= self.free
        }
        for p in self.by_preference(idle):
            cpus = self._of_priority(alloc.packages[p])
            if self.count >= len(cpus):
                self.take(cpus)
                if self.count == 0:
                    return

    def idle_cores(self) -> None:
        """``takeIdleCores``: whole cores whose every thread is free."""
        siblings, free = self.alloc.siblings, self.free
        # each free core once, under its first thread (looked up once per free CPU)
        threads_of: dict[int, CPUSet] = {}
        for cpu in sorted(free):
            threads = siblings(cpu)
            if min(threads.ids()) == cpu and threads.ids() <= free:
                threads_of[cpu] = threads

        for cpu in self.by_preference(threads_of):
            threads = threads_of[cpu]
            if self.count >= len(threads):
                self.take(threads)
                if self.count == 0:
                    return

    def idle_threads(self) -> None:
        """``takeIdleThreads``: single threads (module docstring, step 5)."""
        if self.prefer not in _ORDER:
            self._idle_threads_unranked()
        else:
            self._idle_threads_ranked()

    def _idle_threads_ranked(self) -> None:
        """`idle_threads` by their comparison, step for step."""
        topo, alloc = self.topology, self.alloc
        free = IDSet(self.free)
        taken = IDSet(self.taken)
        pkg_of = {cpu: topo.cpu(cpu).package_id for cpu in free}
        colo = {p: len(cpus & taken) for p, cpus in alloc.packages.items()}
        pkg_free = {p: cpus & free for p, cpus in alloc.packages.items()}
        core_free = {cpu: len(topo.siblings(cpu) & free) for cpu in free}
        alone = {cpu: IDSet((cpu,)) for cpu in free}  # made once, compared many times

        def cmp(i: int, j: int) -> int:
            pi, pj = pkg_of[i], pkg_of[j]
            if colo[pi] != colo[pj]:
                return colo[pj] - colo[pi]
            res = alloc.compare(pkg_free[pi], pkg_free[pj], self.prefer, self.count)
            if res:
                return -res
            if pi != pj:
                return pi - pj
            res = alloc.compare(alone[i], alone[j], self.prefer, 0)
            if res:
                return -res
            if len(pkg_free[pi]) != len(pkg_free[pj]):
                return len(pkg_free[pi]) - len(pkg_free[pj])
            if core_free[i] != core_free[j]:
                return core_free[i] - core_free[j]
            return i - j

        # the first `count` of that order (as sorted()[:count], without ordering the rest:
        # reserving one CPU of 224 compared 1,226 pairs, now 223)
        for cpu in heapq.nsmallest(self.count, free, key=functools.cmp_to_key(cmp)):
            self.take({cpu})

    def _idle_threads_unranked(self) -> None:
        """`idle_threads` with no priority preferred (``none``, the default): compare is
        0 then, and the order a key: packages holding most of the result first, then by
        id; in one, threads whose core has the fewest free threads, then by id.  A
        package is looked at only when those before it could not give `count` threads
        (through `cmp_to_key`, one CPU of 224 threads compared all 200 free ones)."""
        siblings, free, taken = self.alloc.siblings, frozenset(self.free), frozenset(self.taken)
        packages = sorted(
            self.alloc.packages.items(), key=lambda pc: (-len(pc[1].ids() & taken), pc[0])
        )
        picked: list[int] = []
        for _, cpus in packages:
            need = self.count - len(picked)
            if need <= 0:
                break
            here = cpus.ids() & free
            picked.extend(
                heapq.nsmallest(need, here, key=lambda cpu: (len(siblings(cpu).ids() & free), cpu))
            )
        for cpu in picked:
            self.take({cpu})

    def cache_groups(self) -> None:
        """``takeCacheGroups``, for two or more CPUs on a machine with cache groups."""
        groups = self.alloc.cache_groups
        if len(groups) <= 1 or self.count < 2:
            return
        _CacheGroupPick(self, groups).run()


class _CacheGroupPick:
    """``takeCacheGroups``: the groups sorted into idle (`prefer`) and partly used
    (`usable`) ones, each with its free CPUs, counted per package and die."""

    def __init__(self, pick: _Pick, groups: Sequence[CacheGroup]) -> None:
        self.pick = pick
        size = len(groups[0].cpus)
        self.part = pick.count % size
        self.full = pick.count - self.part
        self.prefer: list[CacheGroup] = []
        self.usable: list[CacheGroup] = []
        self.cpus: dict[int, CPUSet] = {}
        self.prefer_pkg: dict[int, int] = {}
        self.prefer_die: dict[tuple[int, int], int] = {}
        self.usable_pkg: dict[int, int] = {}
        self.usable_die: dict[tuple[int, int], int] = {}
        free = IDSet(pick.free)
        for g in groups:
            if pick.alloc.hybrid:
                low = pick.prefer == LOW
                if low != g.efficient:
                    continue
            avail = g.cpus & free
            if not avail:
                continue
            idle = avail == g.cpus
            self.cpus[g.index] = avail
            pkgs, dies = (
                (self.prefer_pkg, self.prefer_die) if idle else (self.usable_pkg, self.usable_die)
            )
            (self.prefer if idle else self.usable).append(g)
            pkgs[g.package] = pkgs.get(g.package, 0) + len(avail)
            dies[g.package, g.die] = dies.get((g.package, g.die), 0) + len(avail)
        self.prefer.sort(key=functools.cmp_to_key(self._sort_idle))
        self.usable.sort(key=functools.cmp_to_key(self._sort_used))

    def _sort_idle(self, a: CacheGroup, b: CacheGroup) -> int:
        """``sortIdle``: a die, else a package, that alone fits the request, tightest
        first; then group ids."""
        dies = (
            self.prefer_die.get((a.package, a.die), 0),
            self.prefer_die.get((b.package, b.die), 0),
            self.usable_die.get((a.package, a.die), 0),
            self.usable_die.get((b.package, b.die), 0),
        )
        pkgs = (
            self.prefer_pkg.get(a.package, 0),
            self.prefer_pkg.get(b.package, 0),
            self.usable_pkg.get(a.package, 0),
            self.usable_pkg.get(b.package, 0),
        )
        for fa, fb, pa, pb in (dies, pkgs):
            res = self._fit(fa, fb, pa, pb)
            if res is not None:
                return res or _by_ids(a, b)
        return a.index - b.index

    def _fit(self, fa: int, fb: int, pa: int, pb: int) -> int | None:
        """One level of ``sortIdle`` for two groups whose die (or package) has `fa`, `fb`
        idle and `pa`, `pb` partly used CPUs: < 0 or > 0 when it decides, 0 for a tie
        (then ids decide), None when the next level decides."""
        full, part = self.full, self.part
        if fa >= full > fb and pa >= part:
            return -1
        if fa < full <= fb and pb >= part:
            return 1
        if fa >= full and fb >= full:
            if pa >= part > pb:
                return -1
            if pa < part <= pb:
                return 1
            if pa >= part and pb >= part:
                return (fa - fb) or (pa - pb)
        return None

    def _sort_used(self, a: CacheGroup, b: CacheGroup) -> int:
        """``sortUsed``: next to the best idle group when idle groups are used, else
        the tightest fitting die; bigger groups first, then ids."""
        size_a, size_b = len(self.cpus[a.index]), len(self.cpus[b.index])
        if self.full > 0 and self.prefer:
            idle = self.prefer[0]
            # (as theirs: the idle group's CPU counts stand in for its package and die)
            die_idle = self.prefer_die.get((idle.package, idle.die), 0)
            pkg_idle = self.prefer_pkg.get(idle.package, 0)
            if a.package == pkg_idle and b.package != pkg_idle:
                return -1
            if a.package != pkg_idle and b.package == pkg_idle:
                return 1
            if a.package == pkg_idle and b.package == pkg_idle:
                if a.die == die_idle and b.die != die_idle:
                    return -1
                if a.die != die_idle and b.die == die_idle:
                    return 1
                if a.die == die_idle and b.die == die_idle:
                    return (size_b - size_a) or (a.index - b.index)
            return 0
        total = self.full + self.part
        da = self.usable_die.get((a.package, a.die), 0)
        db = self.usable_die.get((b.package, b.die), 0)
        if da >= total > db:
            return -1
        if da < total <= db:
            return 1
        if da >= total and db >= total:
            if da != db:
                return da - db
            return (size_b - size_a) or _by_ids(a, b)
        return 0

    def _split(self, cpus: CPUSet, count: int) -> CPUSet | None:
        """Part of one group: whole idle cores, then threads (``AllocIdleCores``)."""
        sub = _Pick(self.pick.alloc, cpus, count, self.pick.prefer)
        return sub.run(cache_groups=False)

    def run(self) -> None:
        pick = self.pick
        if self.prefer:
            chosen = self.prefer[0].package
            pkg_cpus = self.prefer_pkg.get(chosen, 0) + self.usable_pkg.get(chosen, 0)
        elif self.usable:
            chosen = self.usable[0].package
            pkg_cpus = self.usable_pkg.get(chosen, 0)
        else:
            return
        if pkg_cpus < pick.count:
            return
        taken: set[int] = set()
        count = pick.count
        for g in self.prefer:
            if count <= 0:
                break
            cpus = self.cpus[g.index]
            if count >= len(cpus):
                taken |= cpus.ids()
                count -= len(cpus)
                continue
            use = self._split(cpus, count) or IDSet()
            taken |= use.ids()
            count -= len(use)
        if count > 0:
            usable = []
            for g in self.usable:
                if g.package != chosen:
                    break
                usable.append(g)
            exact = [g for g in usable if len(self.cpus[g.index]) == count]
            if exact:
                taken |= self.cpus[exact[0].index].ids()
                count = 0
            else:
                # the fewest groups, largest first, the last one split if need be
                total, n = 0, 0
                for n, g in enumerate(usable, start=1):  # noqa: B007
                    total += len(self.cpus[g.index])
                    if count <= total:
                        break
                if total < count:
                    return
                for g in usable[:n]:
                    cpus = self.cpus[g.index]
                    if count < len(cpus):
                        break
                    taken |= cpus.ids()
                    count -= len(cpus)
                if count > 0:
                    last = self._split(self.cpus[usable[n - 1].index], count)
                    if last is None:
                        return
                    taken |= last.ids()
                    count -= len(last)
        if count != 0:
            return
        pick.take(taken)


def _by_ids(a: CacheGroup, b: CacheGroup) -> int:
    """Smaller package, die and group ids first."""
    if a.package != b.package:
        return a.package - b.package
    if a.die != b.die:
        return a.die - b.die
    return a.index - b.index
