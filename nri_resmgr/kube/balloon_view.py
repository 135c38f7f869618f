"""The balloons policy's zones of the NodeResourceTopology, as nri-plugins fills them.

Theory of operation: `balloon_zones` reads a `BalloonsPolicy` and its state through
their public parts (the ``balloons(state)`` report, the state's balloons and members,
the types, the initial state) and makes one `PoolZone` per balloon, type ``balloon``,
and with ``showContainersInNrt`` one per container in it, type
``allocation for container``, parent the balloon.  The figures are nri-plugins' (their
balloons policy's ``GetTopologyZones``, whose n6-hbm-cxl/test04-nrt reads them):

- a balloon's ``cpu`` capacity is every CPU of the machine; allocatable the largest
  request a container could get in it with no other containers anywhere: its type's
  ``maxCPUs``, or if none or larger, the CPUs free when the policy started (plus the
  balloon's own initial CPUs when it is created at start, ``minBalloons``); available
  the largest request that fits now, the balloon inflated with the CPUs in no balloon
  (up to ``maxCPUs``), less what its containers requested;
- its attributes: ``cpuset``, ``shared cpuset`` (idle CPUs it may use), ``excess cpus``
  (what it holds beyond its containers' requests, as a quantity), ``memory set``,
  ``balloon type``, ``containers``, and a composite's ``component cpusets``;
- a container's ``cpu`` capacity is its CPU limit, or the CPUs it may run on if there is
  none or it is larger; allocatable its request; available always 0 (nothing can be
  placed in a container); its attributes ``cpuset`` and ``memory set`` as rendered.

A composite balloon's growth is bounded here by its own type only (nri-plugins also
bounds it by its components' ``maxCPUs``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from nri_resmgr.kube.nrt import PoolZone, quantity
from nri_resmgr.model import Assignment, ContainerID, ContainerInfo
from nri_resmgr.policy.balloons.policy import BalloonsPolicy
from nri_resmgr.policy.balloons.state import BalloonsState
from nri_resmgr.topology.cpuset import union
from nri_resmgr.topology.model import Topology

__all__ = ["balloon_zones"]


def balloon_zones(
    topology: Topology,
    policy: BalloonsPolicy,
    state: BalloonsState,
    containers: Sequence[tuple[ContainerInfo, Assignment | None]],
) -> tuple[PoolZone, ...]:
    """The zones of every balloon and, where shown, its containers (module docstring)."""
    machine = 1000 * len(topology.online_cpus())
    initial = policy.initial_state()
    initially_free = policy.config.available - union(b.cpus for b in initial.balloons.values())
    free = policy.config.available - union(b.cpus for b in state.balloons.values())
    infos: Mapping[ContainerID, tuple[ContainerInfo, Assignment | None]] = {
        i.id: (i, a) for i, a in containers
    }
    out: list[PoolZone] = []
    for report in policy.balloons(state):
        t = policy.types[report.type]
        own = state.balloons[report.name].cpus if report.name in state.balloons else report.cpus
        biggest = len(initially_free)
        if report.name in initial.balloons:
            biggest += len(initial.balloons[report.name].cpus)
        limit = t.max_cpus if t.max_cpus and t.max_cpus <= biggest else biggest
        room = len(own) + len(free)
        if t.max_cpus and t.max_cpus <= len(free):
            room = t.max_cpus
        requested = state.milli_of(report.name)
        attributes = [
            ("balloon type", report.type),
            ("cpuset", str(report.cpus)),
            ("shared cpuset", str(report.shared_idle_cpus)),
            ("memory set", str(report.mems)),
            ("containers", str(len(report.containers))),
            ("excess cpus", quantity(report.excess_milli)),
        ]
        if report.component_cpus:
            attributes.append(("component cpusets", report.component_cpus))
        out.append(
            PoolZone(
                name=report.name,
                type="balloon",
                parent="",
                resources={
                    "cpu": (
                        quantity(machine),
                        quantity(1000 * limit),
                        quantity(max(1000 * room - requested, 0)),
                    )
                },
                attributes=tuple(attributes),
            )
        )
        if report.show_containers_in_nrt:
            out += [
                _container_zone(report.name, infos[ContainerID(c)], machine)
                for c in report.containers
                if ContainerID(c) in infos
            ]
    return tuple(out)


def _container_zone(
    balloon: str, entry: tuple[ContainerInfo, Assignment | None], machine: int
) -> PoolZone:
    info, a = entry
    cpus = a.cpus if a is not None else None
    allowed = 1000 * len(cpus) if cpus else machine
    limit = info.request.cpu_limit_milli or 0
    capacity = allowed if limit == 0 or limit > allowed else limit
    return PoolZone(
        name=f"{info.pod.namespace}/{info.pod.name}/{info.name}",
        type="allocation for container",
        parent=balloon,
        resources={
            "cpu": (quantity(capacity), quantity(info.request.cpu_request_milli), "0"),
        },
        attributes=(
            ("cpuset", str(cpus) if cpus else ""),
            ("memory set", str(a.mems) if a is not None and a.mems else ""),
        ),
    )
