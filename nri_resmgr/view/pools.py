"""What a policy holds besides its containers' cpusets: reserved, shared and balloon CPUs.

Theory of operation: a container's `Assignment` says which CPUs it runs on, but not what
the CPUs nobody runs on are: a reserved CPU with no kube-system container on it, a shared
pool with no shared container, a balloon kept inflated while empty.  `pool_cpus` reads
that from the policy's own state, through the public, typed values each built-in policy
keeps (the topology-aware pool tree and supply, the static policy's reserved and shared
CPUs, the balloons policy's ``balloons(state)`` report), and falls back, for any other
policy, on what the assignments show (the CPUs of RESERVED and SHARED containers).

The built-in policies are told apart by `isinstance` on their classes: typed reads of
public attributes, no lookup of optional hooks by name.  When the policy contract
(issue 23) gains a report hook for this, `pool_cpus` becomes a call to it.

Pure: no files, no sockets, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from nri_resmgr.model import Assignment, CPUKind
from nri_resmgr.policy.balloons.policy import BalloonsPolicy
from nri_resmgr.policy.balloons.state import BalloonsState
from nri_resmgr.policy.static import StaticPolicy, StaticState
from nri_resmgr.policy.topology_aware.policy import TopologyAwarePolicy
from nri_resmgr.policy.topology_aware.state import TopologyAwareState
from nri_resmgr.topology.cpuset import CPUSet, IDSet, NodeSet, union

__all__ = ["BalloonCPUs", "PoolCPUs", "pool_cpus"]


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


def _from_assignments(assignments: Iterable[Assignment]) -> PoolCPUs:
    """What any policy's assignments show: reserved and shared CPUs in use."""
    reserved: list[CPUSet] = []
    shared: dict[str, set[int]] = {}
    for a in assignments:
        if a.kind is CPUKind.RESERVED:
            reserved.append(a.cpus)
        elif a.kind is CPUKind.SHARED:
            shared.setdefault(a.pool or "shared", set()).update(a.cpus)
    return PoolCPUs(reserved=union(reserved), shared={k: IDSet(v) for k, v in shared.items()})


def _topology_aware(state: TopologyAwareState) -> PoolCPUs:
    tree = state.tree
    deepest_first = sorted(tree.pools, key=lambda p: (-p.depth, p.index))
    return PoolCPUs(
        reserved=tree.reserved,
        shared={p.name: state.supply.shared[p.index] for p in deepest_first},
    )


def pool_cpus(policy: object, state: object, assignments: Iterable[Assignment]) -> PoolCPUs:
    """The reserved, shared and balloon CPUs of `policy` in `state` (module docstring).

    `assignments` are the live containers' (the fallback for other policies).
    """
    if isinstance(policy, TopologyAwarePolicy) and isinstance(state, TopologyAwareState):
        return _topology_aware(state)
    if isinstance(policy, StaticPolicy) and isinstance(state, StaticState):
        return PoolCPUs(reserved=policy.reserved, shared={"shared": policy.shared_pool(state)})
    if isinstance(policy, BalloonsPolicy) and isinstance(state, BalloonsState):
        reports = policy.balloons(state)
        return PoolCPUs(
            balloons=tuple(
                BalloonCPUs(
                    name=b.name,
                    type=b.type,
                    cpus=b.cpus,
                    shared_idle_cpus=b.shared_idle_cpus,
                    mems=b.mems,
                    containers=b.containers,
                )
                for b in reports
            )
        )
    return _from_assignments(assignments)
