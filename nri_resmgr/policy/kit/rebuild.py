"""The plumbing of a rebuild (Synchronize) every placement policy shares.

Theory of operation: a rebuild reads what the runtime reports (each container's current
CPUs and memory), reconstructs a state that keeps valid placements where they are, and
renders it.  Three steps are the same in every policy:

- `each_once`: a runtime may list a container twice; it counts once, as first listed;
- `holders_per_cpu`: how many reports hold each CPU, to tell a claim nobody contests
  from one another report overlaps (`common.order_claims` and the policies' own claim
  rules read it);
- `moved`: the rendering of every container whose rendering differs from its report
  (`decide.differs_from_current`): the updates of the rebuild, so that afterwards every
  container runs where the rebuilt state says.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from nri_resmgr.model import Assignment, ContainerID, ContainerInfo
from nri_resmgr.policy.decide import differs_from_current
from nri_resmgr.topology.cpuset import CPUSet

__all__ = ["each_once", "holders_per_cpu", "moved"]


def each_once(containers: Iterable[ContainerInfo]) -> list[ContainerInfo]:
    """`containers`, each id once, as first listed, in the runtime's order."""
    unique: dict[ContainerID, ContainerInfo] = {}
    for c in containers:
        unique.setdefault(c.id, c)
    return list(unique.values())


def holders_per_cpu(cpusets: Iterable[CPUSet | None]) -> Counter[int]:
    """How many of `cpusets` hold each CPU (None holds none)."""
    return Counter(cpu for cpus in cpusets if cpus for cpu in cpus)


def moved(
    containers: Iterable[ContainerInfo], rendered: Mapping[ContainerID, Assignment]
) -> tuple[Assignment, ...]:
    """The renderings of `containers` that differ from their reports, in their order (a
    container `rendered` lacks is left alone)."""
    return tuple(
        rendered[c.id]
        for c in containers
        if c.id in rendered and differs_from_current(c, rendered[c.id])
    )
