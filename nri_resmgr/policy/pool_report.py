"""What a policy holds besides its containers' cpusets: reserved, shared and balloon CPUs.

Theory of operation: a container's `Assignment` says which CPUs it runs on, but not what
the CPUs nobody runs on are: a reserved CPU with no kube-system container on it, a shared
pool with no shared container, a balloon kept inflated while empty.  The policy contract's
`Policy.pool_cpus` hook answers that from the policy's own state as a `PoolCPUs` value;
its default, `pools_from_assignments`, is what any policy's assignments show (the CPUs of
its RESERVED and SHARED containers).  The node picture (`nri_resmgr.view`) reads it.

Pure values: no files, no sockets, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from nri_resmgr.model import Assignment, CPUKind
from nri_resmgr.topology.cpuset import CPUSet, IDSet, NodeSet, union

__all__ = [
    "BalloonCPUs",
    "BalloonReportLike",
    "PoolCPUs",
    "balloon_cpus",
    "pools_from_assignments",
]


class BalloonReportLike(Protocol):
    """What a policy's `Policy.balloons` hook returns per balloon."""

    @property
    def name(self) -> str: ...
    @property
    def type(self) -> str: ...
    @property
    def cpus(self) -> Iterable[int]: ...
    @property
    def shared_idle_cpus(self) -> Iterable[int]: ...
    @property
    def mems(self) -> Iterable[int]: ...
    @property
    def containers(self) -> Sequence[str]: ...
    @property
    def show_containers_in_nrt(self) -> bool: ...
    @property
    def component_cpus(self) -> str: ...
    @property
    def excess_milli(self) -> int: ...


@dataclass(frozen=True, slots=True)
class BalloonCPUs:
    """One balloon: its own CPUs, the idle ones it shares, its memory, its containers."""

    name: str
    type: str
    cpus: CPUSet
    shared_idle_cpus: CPUSet
    mems: NodeSet
    #: container ids, sorted
    containers: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PoolCPUs:
    """The CPUs a policy holds apart from its containers' exclusive ones."""

    reserved: CPUSet = field(default_factory=IDSet)
    #: pool name -> the CPUs its shared containers run on (or would), innermost pools
    #: first: a CPU in several pools' shared sets belongs to the first that names it
    shared: Mapping[str, CPUSet] = field(default_factory=dict)
    balloons: tuple[BalloonCPUs, ...] = ()


def pools_from_assignments(assignments: Iterable[Assignment]) -> PoolCPUs:
    """What any policy's assignments show: reserved and shared CPUs in use."""
    reserved: list[CPUSet] = []
    shared: dict[str, set[int]] = {}
    for a in assignments:
        if a.kind is CPUKind.RESERVED:
            reserved.append(a.cpus)
        elif a.kind is CPUKind.SHARED:
            shared.setdefault(a.pool or "shared", set()).update(a.cpus)
    return PoolCPUs(reserved=union(reserved), shared={k: IDSet(v) for k, v in shared.items()})


def balloon_cpus(reports: Iterable[BalloonReportLike]) -> tuple[BalloonCPUs, ...]:
    """The `Policy.balloons` hook's reports as the picture's values."""
    return tuple(
        BalloonCPUs(
            name=b.name,
            type=b.type,
            cpus=IDSet(b.cpus),
            shared_idle_cpus=IDSet(b.shared_idle_cpus),
            mems=IDSet(b.mems),
            containers=tuple(b.containers),
        )
        for b in reports
    )
