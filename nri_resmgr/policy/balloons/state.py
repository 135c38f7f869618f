"""The balloons state: balloon instances and the containers in them.

Theory of operation: a `Balloon` is one instance of a balloon type (named
``TYPE[INSTANCE]``, nri-plugins' spelling) holding its own CPUs, which no other balloon
holds.  A `Member` is one container in one balloon, with the millicores it requested:
a balloon's size follows the sum of its members' requests (`BalloonsState.milli_of`).
CPUs in no balloon are *idle*; balloon types with ``shareIdleCPUsInSame`` let their
containers run on idle CPUs near their own (`Balloon.shared`).  The state is immutable:
every change builds a new one (`with_balloon`, `with_balloons`, `with_member`,
`with_members`, `without_member`, `without_balloon`).  The balloons are in the order they
were made (nri-plugins' list of balloons, which breaks the fill chain's ties); the
members have no order.

**Cost.**  The members are a persistent map (`immutables.Map`, as the topology-aware
grants), and the state keeps an index of them by balloon with each balloon's millicores
(`members_of`, `milli_of`, `member_ids`), updated with each member added or dropped: a
decision costs what its balloons hold, not what runs on the node.  A state built from
a plain mapping of members (a rebuild) derives the index once, in O(members).

A *composite* balloon (its type has ``components``) holds the CPUs of its component
balloons, instances of other types made for it alone and kept inside it
(`Balloon.components`, recursively: a component may be composite too).  The state's
balloons are the top-level ones: a composite and its components hold their CPUs once,
as one balloon, and the components split the composite's CPUs without overlap.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from immutables import Map

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
class _ByBalloon:
    """The members of each balloon (by container id) and their millicores."""

    ids: Map[str, Map[ContainerID, None]] = field(default_factory=Map)
    milli: Map[str, int] = field(default_factory=Map)

    @classmethod
    def of(cls, members: Iterable[Member]) -> _ByBalloon:
        ids: dict[str, dict[ContainerID, None]] = {}
        milli: dict[str, int] = {}
        for m in members:
            ids.setdefault(m.balloon, {})[m.container_id] = None
            milli[m.balloon] = milli.get(m.balloon, 0) + m.milli
        return cls(Map({k: Map(v) for k, v in ids.items()}), Map(milli))

    def changed(self, old: Member | None, new: Member | None) -> _ByBalloon:
        """This index with member `old` replaced by `new` (None: none)."""
        ids, milli = self.ids.mutate(), self.milli.mutate()
        if old is not None:
            left = ids[old.balloon].delete(old.container_id)
            if left:
                ids[old.balloon] = left
                milli[old.balloon] = milli[old.balloon] - old.milli
            else:
                del ids[old.balloon]
                del milli[old.balloon]
        if new is not None:
            ids[new.balloon] = ids.get(new.balloon, Map()).set(new.container_id, None)
            milli[new.balloon] = milli.get(new.balloon, 0) + new.milli
        return _ByBalloon(ids.finish(), milli.finish())


@dataclass(frozen=True, slots=True)
class BalloonsState(PolicyState):
    """Balloons by name and their members by container id."""

    balloons: Mapping[str, Balloon]
    members: Mapping[ContainerID, Member]
    #: derived from `members` (module docstring); not part of the value
    index: _ByBalloon | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.members, Map):
            object.__setattr__(self, "members", Map(self.members))
        if self.index is None:
            object.__setattr__(self, "index", _ByBalloon.of(self.members.values()))

    @property
    def _index(self) -> _ByBalloon:
        assert self.index is not None  # set by __post_init__
        return self.index

    @property
    def _members(self) -> Map[ContainerID, Member]:
        assert isinstance(self.members, Map)  # made one by __post_init__
        return self.members

    @property
    def used(self) -> CPUSet:
        """The CPUs held by any balloon."""
        return union(b.cpus for b in self.balloons.values())

    def member_ids(self, name: str) -> Iterable[ContainerID]:
        """The containers in balloon `name`."""
        return self._index.ids.get(name, Map()).keys()

    def member_count(self, name: str) -> int:
        """How many containers are in balloon `name`."""
        return len(self._index.ids.get(name, Map()))

    def members_of(self, name: str) -> list[Member]:
        return [self.members[cid] for cid in self.member_ids(name)]

    def milli_of(self, name: str) -> int:
        """The millicores the members of balloon `name` requested."""
        return self._index.milli.get(name, 0)

    def of_type(self, type_name: str) -> list[Balloon]:
        return [b for b in self.balloons.values() if b.type == type_name]

    def with_balloon(self, balloon: Balloon) -> BalloonsState:
        return self.with_balloons({**self.balloons, balloon.name: balloon})

    def with_balloons(self, balloons: Mapping[str, Balloon]) -> BalloonsState:
        """This state with `balloons` instead of its own (the same members)."""
        return BalloonsState(balloons=balloons, members=self.members, index=self.index)

    def without_balloon(self, name: str) -> BalloonsState:
        return self.with_balloons({k: b for k, b in self.balloons.items() if k != name})

    def with_member(self, member: Member) -> BalloonsState:
        return self.with_members((member,))

    def with_members(self, members: Iterable[Member]) -> BalloonsState:
        """This state with `members` added (each replacing the container's previous one)."""
        out, index = self._members.mutate(), self._index
        for m in members:
            index = index.changed(out.get(m.container_id), m)
            out[m.container_id] = m
        return BalloonsState(balloons=self.balloons, members=out.finish(), index=index)

    def without_member(self, cid: ContainerID) -> BalloonsState:
        old = self.members.get(cid)
        if old is None:
            return self
        return BalloonsState(
            balloons=self.balloons,
            members=self._members.delete(cid),
            index=self._index.changed(old, None),
        )
