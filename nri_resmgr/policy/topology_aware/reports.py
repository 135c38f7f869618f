"""What a rebuild reads from the runtime's reports, one container at a time.

Theory of operation: at Synchronize the runtime reports each container's current
cpuset and memory nodes (`ContainerInfo.current_cpus/current_mems`), which may be
anything: valid placements, a fail-open creation on every CPU, stale or foreign CPUs.
`rebuild.Rebuilder.rebuild` decides from them; these pure functions are the
readings it takes: the exclusive grant a report could be (`claim_of`), the pool whose
rendering matches a report (`hint_for`), the CPUs shared views lack, which tells a mixed
container's own CPUs and the hidden threads of a hide-hyperthreads grant apart
(`missing_from_shared_views`), and the request standing in
for a container whose annotations cannot be read (`unreadable_request`).  `Reports`
holds the per-CPU readings of all reports, taken once per rebuild pass.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from nri_resmgr.model import ContainerID, ContainerInfo, CPUKind
from nri_resmgr.policy.common import one_thread_per_core
from nri_resmgr.policy.kit.rebuild import holders_per_cpu
from nri_resmgr.policy.topology_aware.pools import PoolTree
from nri_resmgr.policy.topology_aware.preferences import ALL_MEMORY, ContainerRequest
from nri_resmgr.policy.topology_aware.rendering import pinned_mems
from nri_resmgr.policy.topology_aware.state import TopologyAwareState
from nri_resmgr.topology.cpuset import CPUSet, IDSet
from nri_resmgr.topology.model import Topology

__all__ = [
    "Reports",
    "claim_of",
    "hint_for",
    "missing_from_shared_views",
    "pins_cpus",
    "unreadable_request",
]


def pins_cpus(request: ContainerRequest) -> bool:
    """Whether the policy decides the CPUs of a container with `request` (not opted out)."""
    return request.pin_cpu and request.kind is not CPUKind.NONE


def unreadable_request(*, pin_cpu: bool) -> ContainerRequest:
    """The request of a running container whose annotations cannot be read.

    Rebuild must account for it all the same: on shared CPUs (off every exclusive
    grant), its demand not counted, its memory left alone
    (`rebuild.Rebuilder._overcommit`).
    """
    return ContainerRequest(
        kind=CPUKind.SHARED,
        full=0,
        shared_milli=0,
        prefer_isolated=False,
        hide_hyperthreads=False,
        memory_kinds=ALL_MEMORY,
        memory_bytes=0,
        pin_cpu=pin_cpu,
        pin_memory=False,
    )


def missing_from_shared_views(
    tree: PoolTree,
    containers: Sequence[ContainerInfo],
    requests: Mapping[ContainerID, ContainerRequest],
) -> Counter[int]:
    """Per CPU, how many shared/mixed containers' cpusets lack it though their pool has it.

    A shared view is its pool's sharable CPUs minus every exclusive CPU; a CPU missing
    from it is somebody's exclusive CPU.  That is how a mixed container's own whole CPUs
    are told apart from the shared part of its cpuset.
    """
    missing: Counter[int] = Counter()
    for c in containers:
        req = requests[c.id]
        view = (c.current_cpus or IDSet()) & tree.root.cpus
        if not view or req.kind not in (CPUKind.SHARED, CPUKind.MIXED):
            continue
        if req.hide_hyperthreads or not req.pin_cpu:
            continue
        pool = tree.pools[tree.deepest_containing(view)[0]]
        missing.update(pool.sharable - view)
    return missing


def claim_of(
    tree: PoolTree,
    topology: Topology,
    c: ContainerInfo,
    req: ContainerRequest,
    *,
    holders: Mapping[int, int] | None = None,
    missing: Mapping[int, int] | None = None,
) -> CPUSet | None:
    """The CPUs `c`'s report would hold as its exclusive grant, if it could be one.

    Only the report's own shape is judged (an exclusive, pinned request; the right
    size; CPUs of the tree); `rebuild.Rebuilder._reclaim` judges it against the grants kept so far.
    Under hide-hyperthreads a grant of N CPUs shows the lowest of its threads on each
    core it touches (`rendering`), so the report names the cores and, on each, a thread
    held; the claim adds to it the N - |shown| hidden threads it needs from the higher
    threads of those cores, first those in nobody's cpuset (`holders`: how many reports
    hold each CPU; a thread a shared container sees is not hidden), of those first the
    ones shared views lack (`missing`, `missing_from_shared_views`: somebody's exclusive
    CPU, while a thread no view covers may be free), any such choice rendering as the
    report does.
    """
    shown = c.current_cpus
    if (
        shown is None
        or req.kind is not CPUKind.EXCLUSIVE
        or not req.pin_cpu
        or not shown <= tree.root.cpus
    ):
        return None
    if not req.hide_hyperthreads:
        return shown if len(shown) == req.full else None
    cores = topology.cores_of(shown)
    need = req.full - len(shown)
    if len(cores) != len(shown) or need < 0:
        return None
    hidden = sorted(
        (t for cpu in shown for t in topology.siblings(cpu) if t > cpu and t in tree.root.cpus),
        key=lambda t: ((holders or {}).get(t, 0) > 0, not (missing or {}).get(t, 0), t),
    )
    if len(hidden) < need:
        return None
    return shown | IDSet(hidden[:need])


def hint_for(
    topology: Topology, state: TopologyAwareState, c: ContainerInfo, req: ContainerRequest
) -> int | None:
    """The deepest pool whose rendering for `req` in `state` matches what `c` has now."""
    if c.current_cpus is None and c.current_mems is None:
        return None
    tree, supply = state.tree, state.supply
    for index in tree.deepest_containing(IDSet()):
        pool = tree.pools[index]
        cpu_ok = True
        if req.pin_cpu and c.current_cpus is not None:
            if req.kind is CPUKind.SHARED:
                shared = supply.shared[index]
                if req.hide_hyperthreads:
                    shared = one_thread_per_core(topology, shared)
                cpu_ok = shared == c.current_cpus
            else:
                cpu_ok = c.current_cpus <= pool.cpus
        mem_ok = (
            not req.pin_memory
            or c.current_mems is None
            or pinned_mems(tree, topology, pool, req.kind, req) == c.current_mems
        )
        if cpu_ok and mem_ok:
            return index
    return None


@dataclass(frozen=True, slots=True)
class Reports:
    """What the reports say about each CPU, read once per rebuild pass (`read`)."""

    #: the containers by id (each once)
    containers: Mapping[ContainerID, ContainerInfo]
    #: how many reports hold each CPU; one of a container that opted out of pinning
    #: (cpu.preserve, pinCPU: false) holds none: we never set it, it may be every CPU
    holders: Counter[int]
    #: how many shared views lack each CPU (`reports.missing_from_shared_views`)
    missing: Counter[int]
    #: the threads a pinned hide-hyperthreads report may hide: the higher siblings of
    #: its CPUs (the rendering shows the lowest thread held on each core, so a lower
    #: sibling is not held)
    hidden_by: Mapping[ContainerID, frozenset[int]]
    #: how many reports may hide each CPU
    hidden: Counter[int]

    @classmethod
    def read(
        cls,
        tree: PoolTree,
        topology: Topology,
        containers: Sequence[ContainerInfo],
        requests: Mapping[ContainerID, ContainerRequest],
    ) -> Reports:
        hidden_by = {
            c.id: frozenset(
                sib
                for cpu in (c.current_cpus or IDSet()) & tree.root.cpus
                for sib in topology.siblings(cpu)
                if sib > cpu
            )
            for c in containers
            if requests[c.id].hide_hyperthreads and pins_cpus(requests[c.id])
        }
        return cls(
            containers={c.id: c for c in containers},
            holders=holders_per_cpu(
                c.current_cpus for c in containers if pins_cpus(requests[c.id])
            ),
            missing=missing_from_shared_views(tree, containers, requests),
            hidden_by=hidden_by,
            hidden=holders_per_cpu(IDSet(cpus) for cpus in hidden_by.values()),
        )
