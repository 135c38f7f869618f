"""Helpers the policies share: quantities, annotations, CPU picking, rebuild order.

Theory of operation: these are the pieces of placement logic more than one policy
needs; the decision plumbing (renderings in, a `Decision` out) is `policy.decide`.

`take_cpus` is the CPU picker, modelled on the kubelet's `takeByTopology`
(pkg/kubelet/cm/cpumanager/cpu_assignment.go): it takes whole free packages, then whole
free NUMA nodes, then whole free cores, and only then single threads, packing into the
domains that already have the fewest free CPUs so that big free domains stay whole.

Quantities follow Kubernetes' CPU notation (``750m``, ``2``, ``1.5``); CPU sets in
configuration carry a ``cpuset:`` prefix (nri-plugins' form) so the two cannot be
confused.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from nri_resmgr.limits import shown
from nri_resmgr.model import (
    AnnotationError,
    Assignment,
    ContainerID,
    ContainerInfo,
    CPUKind,
)
from nri_resmgr.policy.kit.rebuild import holders_per_cpu
from nri_resmgr.topology.cpuset import CPUSet, IDSet, IDSetError, union
from nri_resmgr.topology.model import Topology
from nri_resmgr.validation import InvalidConfig, Problem, invalid

__all__ = [
    "TRUE_WORDS",
    "CPUAmount",
    "lowest_cpus",
    "namespace_matches",
    "one_thread_per_core",
    "order_claims",
    "parse_bool_annotation",
    "parse_cpu_amount",
    "parse_cpu_list",
    "parse_cpu_quantity",
    "parse_memory_quantity",
    "take_cpus",
]

#: the spellings Go's strconv.ParseBool accepts (what nri-plugins users write)
TRUE_WORDS = frozenset({"1", "t", "true", "y", "yes", "on"})
FALSE_WORDS = frozenset({"0", "f", "false", "n", "no", "off"})


def parse_bool_annotation(container: ContainerInfo, key: str) -> bool | None:
    """The effective boolean value of annotation `key`, or None when absent."""
    raw = container.annotation(key)
    if raw is None:
        return None
    word = raw.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    found = shown(raw, quote='"')
    raise AnnotationError(
        f"{container.pretty}: annotation {key} has value {found}; expected true or false"
    )


def parse_cpu_quantity(text: str, *, subject: str, path: str) -> int:
    """A Kubernetes CPU quantity (``750m``, ``2``, ``0.5``) in millicores; a problem is
    `InvalidConfig` of `subject` at `path`."""
    s = text.strip()
    try:
        # float("1e400") is inf, which round() cannot convert: not a quantity either
        milli = int(s[:-1], 10) if s.endswith("m") else round(float(s) * 1000)
    except (ValueError, OverflowError) as exc:
        raise invalid(
            subject, path, f"{text!r} is not a CPU quantity; expected e.g. 750m, 2 or 1.5"
        ) from exc
    if milli < 0 or not math.isfinite(milli):
        raise invalid(subject, path, f"{text!r} is negative; expected a CPU quantity >= 0")
    return milli


_MEMORY_QUANTITY = re.compile(r"(\d{1,20}(?:\.\d{1,20})?)([kKMGTPE]i?)?")
_MEMORY_UNITS: dict[str | None, int] = {
    None: 1,
    "k": 10**3,
    "K": 10**3,
    **{u: 10 ** (3 * (i + 2)) for i, u in enumerate("MGTPE")},
    **{f"{u}i": 1 << (10 * (i + 1)) for i, u in enumerate("KMGTPE")},
}


def parse_memory_quantity(text: str) -> int | None:
    """A Kubernetes memory quantity (``100M``, ``2.5G``, ``1Gi``, ``1024``) in bytes,
    or None when `text` is not one (the caller names the subject in its error)."""
    m = _MEMORY_QUANTITY.fullmatch(text.strip())
    if m is None or (m.group(2) == "ki"):
        return None
    return int(float(m.group(1)) * _MEMORY_UNITS[m.group(2)])


@dataclass(frozen=True, slots=True)
class CPUAmount:
    """A CPU amount from configuration: either millicores or an explicit CPU set."""

    milli: int = 0
    cpuset: CPUSet | None = None


def parse_cpu_amount(text: str | int | float, *, subject: str, path: str) -> CPUAmount:
    """``cpuset:0-1`` (an explicit set) or a quantity such as ``750m``; a problem is
    `InvalidConfig` of `subject` at `path` (one per bad element of a CPU list)."""
    if isinstance(text, int | float):
        if not math.isfinite(text):
            raise invalid(
                subject, path, f"{text!r} is not a CPU quantity; expected a finite number"
            )
        return CPUAmount(milli=round(text * 1000))
    s = text.strip()
    if s.startswith("cpuset:"):
        cpus = parse_cpu_list(s[len("cpuset:") :], subject=subject, path=path)
        return CPUAmount(milli=1000 * len(cpus), cpuset=cpus)
    return CPUAmount(milli=parse_cpu_quantity(s, subject=subject, path=path))


def parse_cpu_list(text: str, *, subject: str, path: str) -> CPUSet:
    """A kernel CPU list (``0-3,8``); `InvalidConfig` of `subject` at `path` with one
    problem per bad element."""
    try:
        return IDSet.parse(text)
    except IDSetError as exc:
        raise InvalidConfig(subject, [Problem(path, p) for p in exc.problems]) from exc


def namespace_matches(namespace: str, globs: Iterable[str]) -> bool:
    """Whether `namespace` matches one of the shell-style `globs`."""
    return any(fnmatch.fnmatchcase(namespace, g) for g in globs)


def one_thread_per_core(topology: Topology, cpus: CPUSet) -> CPUSet:
    """The lowest thread of every core present in `cpus` (``hide-hyperthreads``)."""
    return IDSet(threads.sorted()[0] for threads in topology.cores_of(cpus).values())


def lowest_cpus(topology: Topology, available: CPUSet, count: int) -> CPUSet:
    """`count` CPUs from the lowest-numbered cores, a core's threads together.

    Used for reserved CPUs given as a quantity: the kubelet and nri-plugins both reserve
    ``ceil(quantity)`` CPUs starting from CPU 0.
    """
    cores = sorted(topology.cores_of(available).values(), key=lambda t: t.sorted()[0])
    out: list[int] = []
    for threads in cores:
        for cpu in threads:
            if len(out) < count:
                out.append(cpu)
    return IDSet(out)


def take_cpus(
    topology: Topology,
    available: CPUSet,
    count: int,
    *,
    full_cores_only: bool = False,
    prefer: CPUSet | Sequence[CPUSet] | None = None,
) -> CPUSet | None:
    """Pick `count` CPUs out of `available`, topology-aligned; None when impossible.

    Order (kubelet's takeByTopology, plus L3 awareness):

    1. whole free packages, while at least a package's worth is still needed;
    2. whole free NUMA nodes, likewise;
    3. whole free cores, packed: cores in the package/node/L3 with the fewest free CPUs
       first (ties by id), so that large free domains stay whole;
    4. single threads, from the cores with the fewest free threads first (completing a
       core another container already broke), then by the same packing order.

    `prefer` (a container's current CPUs, during rebuild and update) is one set or a
    sequence of sets in decreasing preference: CPUs of the first set are taken first (by
    the order above, among themselves), then those of the next, then any.  With
    `full_cores_only` (kubelet ``full-pcpus-only``) step 4 is not allowed.
    """
    if count <= 0:
        return IDSet()
    if count > len(available):
        return None
    tiers = [prefer] if isinstance(prefer, IDSet) else list(prefer or ())
    if tiers and not full_cores_only:
        taken = IDSet()
        for tier in tiers:
            pool = (available & tier) - taken
            need = count - len(taken)
            if need <= 0 or not pool:
                continue
            part = _take_cpus(topology, pool, min(need, len(pool)), full_cores_only=False)
            taken = taken | (part or IDSet())
        rest = _take_cpus(topology, available - taken, count - len(taken), full_cores_only=False)
        return None if rest is None else taken | rest
    return _take_cpus(topology, available, count, full_cores_only=full_cores_only)


def _take_cpus(
    topology: Topology, available: CPUSet, count: int, *, full_cores_only: bool
) -> CPUSet | None:
    if count <= 0:
        return IDSet()
    if count > len(available):
        return None
    free = set(available)
    taken: list[int] = []

    def take_whole(groups: Iterable[CPUSet]) -> None:
        for cpus in groups:
            need = count - len(taken)
            if 0 < len(cpus) <= need and cpus.ids() <= free:
                taken.extend(cpus)
                free.difference_update(cpus)

    take_whole(topology.package_cpus(p) for p in topology.package_ids())
    take_whole(topology.node_cpus(n) for n in topology.node_ids(with_cpus=True))

    # the packing order ranks a CPU by how many free CPUs its package, node and L3 group
    # have; each domain's count is taken once per sort rather than once per CPU
    def free_in(cpus: CPUSet) -> int:
        return len(free & cpus.ids())

    def packing_keys() -> Callable[[int], tuple[int, ...]]:
        packages: dict[int, int] = {}
        nodes: dict[int, int] = {}
        l3s: dict[int, int] = {}

        def packing_key(cpu: int) -> tuple[int, ...]:
            rec = topology.cpu(cpu)
            p, n, l3 = rec.package_id, rec.node_id, rec.l3_id
            if p not in packages:
                packages[p] = free_in(topology.package_cpus(p))
            if n not in nodes:
                nodes[n] = free_in(topology.node_cpus(n))
            if l3 not in l3s:
                l3s[l3] = free_in(topology.l3_cpus(l3))
            return (packages[p], p, nodes[n], n, l3s[l3], l3)

        return packing_key

    # 3. whole free cores
    cores = [
        t
        for t in topology.cores_of(IDSet(free)).values()
        if len(t) == len(topology.siblings(t.sorted()[0]))
    ]
    packing_key = packing_keys()
    cores.sort(key=lambda t: (*packing_key(t.sorted()[0]), t.sorted()[0]))
    for threads in cores:
        if len(threads) <= count - len(taken):
            taken.extend(threads)
            free.difference_update(threads)
    need = count - len(taken)
    if need == 0:
        return IDSet(taken)
    if full_cores_only:
        return None
    # 4. single threads
    packing_key = packing_keys()
    free_threads: dict[int, int] = {}

    def free_siblings(cpu: int) -> int:
        core = topology.cpu(cpu).core_id
        if core not in free_threads:
            free_threads[core] = free_in(topology.siblings(cpu))
        return free_threads[core]

    rest = sorted(free, key=lambda c: (free_siblings(c), *packing_key(c), c))
    taken.extend(rest[:need])
    return IDSet(taken) if len(taken) == count else None


def order_claims(
    claims: Mapping[ContainerID, CPUSet],
    *,
    others: Iterable[CPUSet] = (),
    shared_like: Collection[ContainerID] = (),
) -> list[ContainerID]:
    """The order in which a rebuild tries to keep exclusive placements where they are.

    `claims` maps each container whose reported cpuset could be its own exclusive grant
    to that cpuset, in the order the runtime listed them; `others` are the cpusets the
    other pinned containers report.  Claims that overlap no other report come first: an
    exclusive grant rendered as it is shows its CPUs to nobody else, while a cpuset that
    only has the size of a claim (a container that fell back to shared) is shown to
    everyone sharing it.  Then claims that overlap only other containers' cpusets; then
    claims that overlap other claims, so that one container claiming many CPUs (a
    fail-open creation, a hostile report) loses to the valid grants it covers.  Within
    each group the claims the policy names `shared_like` (its CPUs are exactly a shared
    set the others would leave) go last, then smaller claims first; ties keep the
    runtime's order.  A rebuild keeps a claim only while it is disjoint from the ones
    kept before it: of two containers reporting the same CPUs, the first listed keeps
    them and the other moves.
    """
    holders = holders_per_cpu(claims.values())
    seen = union(others)
    position = {cid: i for i, cid in enumerate(claims)}

    def key(cid: ContainerID) -> tuple[bool, bool, bool, int, int]:
        cpus = claims[cid]
        contested = any(holders[cpu] > 1 for cpu in cpus)
        return (
            contested,
            not cpus.isdisjoint(seen),
            cid in shared_like,
            len(cpus),
            position[cid],
        )

    return sorted(claims, key=key)


def all_cpus(assignments: Iterable[Assignment], kinds: Collection[CPUKind]) -> CPUSet:
    """The union of CPUs of the assignments of the given kinds."""
    return union(a.cpus for a in assignments if a.kind in kinds)
