"""The balloons state: balloon instances and the containers in them.

Theory of operation: a `Balloon` is one instance of a balloon type (named
``TYPE[INSTANCE]``, nri-plugins' spelling) holding its own CPUs, which no other balloon
holds.  A `Member` is one container in one balloon, with the millicores it requested:
a balloon's size follows the sum of its members' requests (`BalloonsState.milli_of`).
CPUs in no balloon are *idle*; balloon types with ``shareIdleCPUsInSame`` let their
containers run on idle CPUs near their own (`Balloon.shared`).  The state is immutable:
every change builds a new one (`with_balloon`, `with_member`, `without_member`,
`without_balloon`).  The balloons are in the order they were made (nri-plugins' list of
balloons, which breaks the fill chain's ties).

A *composite* balloon (its type has ``components``) holds the CPUs of its component
balloons, instances of other types made for it alone and kept inside it
(`Balloon.components`, recursively: a component may be composite too).  The state's
balloons are the top-level ones: a composite and its components hold their CPUs once,
as one balloon, and the components split the composite's CPUs without overlap.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from nri_resmgr.model import ContainerID, MemoryKind, PodID, PolicyState, TopologyHint
from nri_resmgr.policy.balloons.memzone import MemZone
from nri_resmgr.topology.cpuset import CPUSet, IDSet, union

__all__ = ["Balloon", "BalloonsState", "Member", "balloon_name"]

_NO_CPUS: CPUSet = IDSet()


def balloon_name(type_name: str, instance: int) -> str:
    """nri-plugins' name of instance `instance` of balloon type `type_name`."""
    return f"{type_name}[{instance}]"


@dataclass(frozen=True, slots=True)
class Balloon:
    """One balloon instance and its own CPUs."""

    type: str
    instance: int
    cpus: CPUSet
    #: a composite balloon's component balloons, whose CPUs it holds; () when plain
    components: tuple[Balloon, ...] = ()
    #: the idle CPUs its containers share (``shareIdleCPUsInSame``), kept as nri-plugins
    #: keeps them: CPUs join when they become idle in its domains or a balloon inflates,
    #: and leave only when a balloon takes them (`BalloonsPolicy.share_idle`)
    shared: CPUSet = _NO_CPUS

    @property
    def name(self) -> str:
        return balloon_name(self.type, self.instance)

    def walk(self) -> Iterator[Balloon]:
        """This balloon and its components, recursively (depth first)."""
        yield self
        for comp in self.components:
            yield from comp.walk()


@dataclass(frozen=True, slots=True)
class Member:
    """One container in a balloon."""

    container_id: ContainerID
    pod_id: PodID
    namespace: str
    #: the container's pretty name, for reports
    pretty: str
    balloon: str
    milli: int
    #: the value of the type's ``groupBy`` for this container ("" when none)
    group: str = ""
    #: the ``hide-hyperthreads`` annotation (None: the type's ``hideHyperthreads``)
    hide_hyperthreads: bool | None = None
    #: the ``memory-type`` annotation's kinds, overriding the type's ``memoryTypes``
    memory_kinds: tuple[MemoryKind, ...] = ()
    #: ``memory.preserve``: the policy leaves its memory nodes alone
    preserve_mems: bool = False
    #: the kubelet's devices of the container (`devices.kubelet_devices`), kept when its
    #: type prefers ``podresourceapi:`` devices
    devices: tuple[TopologyHint, ...] = ()
    #: its memory zone (`memzone`), which only widens as its balloon changes; None
    #: when memory is not pinned (its nodes are its balloon's)
    memory: MemZone | None = None


@dataclass(frozen=True, slots=True)
class BalloonsState(PolicyState):
    """Balloons by name and their members by container id."""

    balloons: Mapping[str, Balloon]
    members: Mapping[ContainerID, Member]

    @property
    def used(self) -> CPUSet:
        """The CPUs held by any balloon."""
        return union(b.cpus for b in self.balloons.values())

    def members_of(self, name: str) -> list[Member]:
        return [m for m in self.members.values() if m.balloon == name]

    def milli_of(self, name: str) -> int:
        """The millicores the members of balloon `name` requested."""
        return sum(m.milli for m in self.members.values() if m.balloon == name)

    def of_type(self, type_name: str) -> list[Balloon]:
        return [b for b in self.balloons.values() if b.type == type_name]

    def with_balloon(self, balloon: Balloon) -> BalloonsState:
        return BalloonsState(
            balloons={**self.balloons, balloon.name: balloon}, members=self.members
        )

    def without_balloon(self, name: str) -> BalloonsState:
        return BalloonsState(
            balloons={k: b for k, b in self.balloons.items() if k != name}, members=self.members
        )

    def with_member(self, member: Member) -> BalloonsState:
        return BalloonsState(
            balloons=self.balloons, members={**self.members, member.container_id: member}
        )

    def without_member(self, cid: ContainerID) -> BalloonsState:
        return BalloonsState(
            balloons=self.balloons, members={k: m for k, m in self.members.items() if k != cid}
        )
