"""A picture of the node: what holds each CPU, each NUMA node's memory, each container.

Theory of operation: `build_view` takes a frozen moment (the machine's `Topology`, the
live containers with their assignments, the policy's `PoolCPUs` and CPU classes) and
returns a `NodeView`, an immutable value every renderer reads (`view.terminal`,
`view.html`) and that travels as JSON between the daemon and `nri-resmgr show`
(`as_dict` / `view_from_dict`, inverse of each other).

The hardware nesting is packages, dies, NUMA nodes, L3 groups, cores and threads (an L3
group that spans nodes appears under each node with that node's share).  Each CPU is
held by exactly one `Holder`, the first of these that claims it:

1. **exclusive** / **isolated**: in the cpuset of an EXCLUSIVE or ISOLATED container, or
   in a MIXED container's cpuset outside every shared and reserved set (its whole CPUs);
2. **balloon**: in a balloon's own CPUs (the balloons policy);
3. **reserved**: the policy's reserved CPUs;
4. **shared**: in a pool's shared set (innermost pool first);
5. **offline** when the kernel has it offline, else **idle**.

A CPU two containers claim exclusively is an invariant broken; the picture shows the
first claimant and lists the CPU in `NodeView.conflicts`.  A NUMA node lists the
containers whose memory is pinned to it (memory nodes that are not every node).

Cost: one pass over the containers and one over the CPUs, O(containers + CPUs), no
policy decision taken: the daemon builds it between events.  Pure: no files, no sockets,
no clock.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nri_resmgr.model import ANNOTATION_DOMAIN, Assignment, ContainerInfo, CPUKind, PolicyState
from nri_resmgr.policy.base import Policy
from nri_resmgr.topology.cpuset import CPUSet, IDSet, union
from nri_resmgr.topology.model import Topology
from nri_resmgr.topology.render import summarize
from nri_resmgr.view.pools import PoolCPUs, pool_cpus

__all__ = [
    "CPUCell",
    "ContainerRow",
    "Holder",
    "MemoryRow",
    "NodeView",
    "build_view",
    "cell_tag",
    "policy_view",
    "view_from_dict",
]


class Holder(enum.StrEnum):
    """What holds a CPU (module docstring, in order of precedence)."""

    EXCLUSIVE = "exclusive"
    ISOLATED = "isolated"
    BALLOON = "balloon"
    RESERVED = "reserved"
    SHARED = "shared"
    IDLE = "idle"
    OFFLINE = "offline"


@dataclass(frozen=True, slots=True)
class CPUCell:
    """One logical CPU and what holds it."""

    id: int
    holder: Holder
    #: the container id (exclusive, isolated), balloon or pool name; "" otherwise
    owner: str = ""
    #: isolated by the kernel (isolcpus)
    isolcpu: bool = False
    #: its CPU class, "" when none
    cpu_class: str = ""


@dataclass(frozen=True, slots=True)
class ContainerRow:
    """One live container as the picture shows it."""

    id: str
    namespace: str
    pod: str
    name: str
    qos: str
    #: "" when the policy has not placed it (no assignment)
    kind: str
    pool: str
    cpus: str
    mems: str
    rdt_class: str
    blockio_class: str
    #: the pod's and container's resource-policy annotations (`shown_annotations`)
    annotations: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> str:
        """``namespace/pod/container``, for people (names may hold anything)."""
        return f"{self.namespace}/{self.pod}/{self.name}"


@dataclass(frozen=True, slots=True)
class MemoryRow:
    """One NUMA node's memory and the containers pinned to it."""

    node: int
    kind: str
    memory_bytes: int
    #: the CPU node a CPU-less node is attached to (itself for a CPU node)
    attached_to: int
    #: ids of the containers whose memory nodes include this one (and not all nodes)
    pinned: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class BalloonRow:
    name: str
    type: str
    cpus: str
    shared_idle_cpus: str
    mems: str
    #: container ids
    containers: tuple[str, ...]


#: the hardware nesting: package -> die -> node -> L3 group -> cores (each its threads)
Cores = tuple[tuple[int, ...], ...]
L3s = tuple[tuple[int, Cores], ...]
Nodes = tuple[tuple[int, L3s], ...]
Dies = tuple[tuple[int, Nodes], ...]
Packages = tuple[tuple[int, Dies], ...]


@dataclass(frozen=True, slots=True)
class NodeView:
    """The whole picture (module docstring)."""

    title: str
    policy: str
    machine: str
    packages: Packages
    cpus: Mapping[int, CPUCell]
    memory: tuple[MemoryRow, ...]
    containers: tuple[ContainerRow, ...]
    balloons: tuple[BalloonRow, ...] = ()
    #: CPUs claimed exclusively by more than one container (an invariant broken)
    conflicts: str = ""
    #: container id -> its row, derived
    by_id: Mapping[str, ContainerRow] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_id", {c.id: c for c in self.containers})

    def cpus_of(self, holder: Holder) -> CPUSet:
        """The CPUs `holder` holds."""
        return IDSet(c.id for c in self.cpus.values() if c.holder is holder)

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (`view_from_dict` reads it back)."""
        return {
            "title": self.title,
            "policy": self.policy,
            "machine": self.machine,
            "packages": _lists(self.packages),
            "cpus": [
                [c.id, str(c.holder), c.owner, c.isolcpu, c.cpu_class] for c in self.cpus.values()
            ],
            "memory": [
                [m.node, m.kind, m.memory_bytes, m.attached_to, list(m.pinned)] for m in self.memory
            ],
            "containers": [
                {
                    "id": c.id,
                    "namespace": c.namespace,
                    "pod": c.pod,
                    "name": c.name,
                    "qos": c.qos,
                    "kind": c.kind,
                    "pool": c.pool,
                    "cpus": c.cpus,
                    "mems": c.mems,
                    "rdt_class": c.rdt_class,
                    "blockio_class": c.blockio_class,
                    "annotations": [list(kv) for kv in c.annotations],
                }
                for c in self.containers
            ],
            "balloons": [
                {
                    "name": b.name,
                    "type": b.type,
                    "cpus": b.cpus,
                    "shared_idle_cpus": b.shared_idle_cpus,
                    "mems": b.mems,
                    "containers": list(b.containers),
                }
                for b in self.balloons
            ],
            "conflicts": self.conflicts,
        }


def _lists(value: Any) -> Any:
    return [_lists(v) for v in value] if isinstance(value, tuple) else value


def _tuples(value: Any) -> Any:
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def _container_row(data: Mapping[str, Any]) -> ContainerRow:
    fields = {k: str(v) for k, v in data.items() if k != "annotations"}
    notes = tuple((str(k), str(v)) for k, v in data.get("annotations", ()))
    return ContainerRow(**fields, annotations=notes)


class ViewError(ValueError):
    """A JSON document that is not a node view."""


def view_from_dict(data: Mapping[str, Any]) -> NodeView:
    """The `NodeView` of its `as_dict` form; `ViewError` names what does not fit."""
    try:
        return NodeView(
            title=str(data["title"]),
            policy=str(data["policy"]),
            machine=str(data["machine"]),
            packages=_tuples(data["packages"]),
            cpus={
                int(i): CPUCell(int(i), Holder(h), str(o), bool(iso), str(cls))
                for i, h, o, iso, cls in data["cpus"]
            },
            memory=tuple(
                MemoryRow(int(n), str(k), int(b), int(a), tuple(map(str, p)))
                for n, k, b, a, p in data["memory"]
            ),
            containers=tuple(_container_row(c) for c in data["containers"]),
            balloons=tuple(
                BalloonRow(**{**b, "containers": tuple(b["containers"])}) for b in data["balloons"]
            ),
            conflicts=str(data.get("conflicts", "")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ViewError(
            f"node view: expected the JSON of NodeView.as_dict, found a document that does "
            f"not fit ({type(exc).__name__}: {exc})"
        ) from exc


_TAG = {Holder.RESERVED: "res", Holder.SHARED: "shr", Holder.IDLE: "idl", Holder.OFFLINE: "off"}


def cell_tag(cell: CPUCell, containers: dict[str, int], balloons: dict[str, int]) -> str:
    """The short tag of what holds `cell` for a picture: ``res``, ``shr``, ``idl``, ``off``,
    ``c<N>`` container N, ``b<N>`` balloon N (numbers from 1); ``*`` when kernel-isolated."""
    if cell.holder in (Holder.EXCLUSIVE, Holder.ISOLATED):
        tag = f"c{containers.get(cell.owner, 0)}"
    elif cell.holder is Holder.BALLOON:
        tag = f"b{balloons.get(cell.owner, 0)}"
    else:
        tag = _TAG[cell.holder]
    return tag + ("*" if cell.isolcpu else "")


# ---- building -------------------------------------------------------------------------


def _hierarchy(topo: Topology) -> Packages:
    packages = []
    for pkg in topo.package_ids():
        dies = []
        for die in topo.die_ids(pkg):
            dcpus = topo.die_cpus(die)
            nodes = []
            for node in topo.node_ids(with_cpus=True):
                ncpus = topo.node_cpus(node) & dcpus
                if not ncpus:
                    continue
                l3s = []
                for l3 in topo.l3_ids(die):
                    share = topo.l3_cpus(l3) & ncpus
                    if share:
                        cores = tuple(tuple(t.sorted()) for t in topo.cores_of(share).values())
                        l3s.append((l3, cores))
                nodes.append((node, tuple(l3s)))
            dies.append((die, tuple(nodes)))
        packages.append((pkg, tuple(dies)))
    return tuple(packages)


#: a picture shows at most this many annotations per container, each value at most
#: `MAX_ANNOTATION_CHARS` characters: what a pod spec carries cannot make a page large
MAX_ANNOTATIONS = 16
MAX_ANNOTATION_CHARS = 256


def shown_annotations(info: ContainerInfo) -> tuple[tuple[str, str], ...]:
    """The pod's and the container's annotations in the ``resource-policy.nri.io``
    domain (those a policy reads), sorted, bounded by `MAX_ANNOTATIONS` and
    `MAX_ANNOTATION_CHARS` (a longer value ends in ``... (N more)``)."""
    found = {
        k: v
        for source in (info.pod.annotations, info.annotations)
        for k, v in source.items()
        if ANNOTATION_DOMAIN in k
    }
    out = []
    for k, v in sorted(found.items())[:MAX_ANNOTATIONS]:
        if len(v) > MAX_ANNOTATION_CHARS:
            v = f"{v[:MAX_ANNOTATION_CHARS]}... ({len(v) - MAX_ANNOTATION_CHARS} more)"
        out.append((k[:MAX_ANNOTATION_CHARS], v))
    return tuple(out)


def _row(info: ContainerInfo, a: Assignment | None) -> ContainerRow:
    return ContainerRow(
        id=str(info.id),
        namespace=info.pod.namespace,
        pod=info.pod.name,
        name=info.name,
        qos=str(info.qos_class),
        kind=str(a.kind) if a is not None else "",
        pool=a.pool if a is not None else "",
        cpus=str(a.cpus) if a is not None else "",
        mems=str(a.mems) if a is not None else "",
        rdt_class=(a.rdt_class or "") if a is not None else "",
        blockio_class=(a.blockio_class or "") if a is not None else "",
        annotations=shown_annotations(info),
    )


def build_view(
    topology: Topology,
    *,
    policy: str,
    containers: Sequence[tuple[ContainerInfo, Assignment | None]],
    pools: PoolCPUs,
    cpu_classes: Mapping[str, CPUSet] | None = None,
    title: str = "",
) -> NodeView:
    """The picture of one moment (module docstring)."""
    shared_anywhere = union(pools.shared.values()) | pools.reserved
    claims: dict[int, tuple[Holder, str]] = {}
    conflicts: set[int] = set()
    all_nodes = IDSet(topology.nodes)
    pinned: dict[int, list[str]] = {n: [] for n in topology.nodes}
    for info, a in containers:
        if a is None:
            continue
        if a.mems and a.mems != all_nodes:
            for n in a.mems:
                pinned.setdefault(n, []).append(str(info.id))
        if a.kind in (CPUKind.EXCLUSIVE, CPUKind.ISOLATED):
            own, holder = a.cpus, Holder(str(a.kind))
        elif a.kind is CPUKind.MIXED:
            own, holder = a.cpus - shared_anywhere, Holder.EXCLUSIVE
        else:
            continue
        for cpu in own:
            if cpu in claims:
                conflicts.add(cpu)
            else:
                claims[cpu] = (holder, str(info.id))
    for b in pools.balloons:
        for cpu in b.cpus:
            claims.setdefault(cpu, (Holder.BALLOON, b.name))
    for cpu in pools.reserved:
        claims.setdefault(cpu, (Holder.RESERVED, ""))
    for name, cpus in pools.shared.items():
        for cpu in cpus:
            claims.setdefault(cpu, (Holder.SHARED, name))
    class_of = {cpu: name for name, cpus in (cpu_classes or {}).items() for cpu in cpus}
    cells = {}
    for cid, rec in topology.cpus.items():
        idle = (Holder.IDLE if rec.online else Holder.OFFLINE, "")
        holder, owner = claims.get(cid, idle) if rec.online else idle
        cells[cid] = CPUCell(cid, holder, owner, rec.isolated, class_of.get(cid, ""))
    cpu_nodes = set(topology.node_ids(with_cpus=True))
    memory = tuple(
        MemoryRow(
            node=n.id,
            kind=str(n.kind),
            memory_bytes=n.memory_bytes,
            attached_to=topology.closest_cpu_node(n.id) if cpu_nodes else n.id,
            pinned=tuple(pinned.get(n.id, ())),
        )
        for n in topology.nodes.values()
    )
    return NodeView(
        title=title,
        policy=policy,
        machine=summarize(topology),
        packages=_hierarchy(topology),
        cpus=cells,
        memory=memory,
        containers=tuple(_row(info, a) for info, a in containers),
        balloons=tuple(
            BalloonRow(
                name=b.name,
                type=b.type,
                cpus=str(b.cpus),
                shared_idle_cpus=str(b.shared_idle_cpus),
                mems=str(b.mems),
                containers=b.containers,
            )
            for b in pools.balloons
        ),
        conflicts=str(IDSet(conflicts)),
    )


def policy_view(
    topology: Topology,
    *,
    policy: Policy,
    policy_name: str,
    state: PolicyState,
    containers: Sequence[tuple[ContainerInfo, Assignment | None]],
    title: str = "",
) -> NodeView:
    """`build_view` of a policy in `state`: its pools and CPU classes read from it."""
    assignments = [a for _, a in containers if a is not None]
    return build_view(
        topology,
        policy=policy_name,
        containers=containers,
        pools=pool_cpus(policy, state, assignments),
        cpu_classes=policy.cpu_class_use(state).cpus,
        title=title,
    )
