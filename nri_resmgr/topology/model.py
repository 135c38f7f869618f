"""The machine model: CPUs, their caches and cores, NUMA nodes and their memory.

Theory of operation: a `Topology` is an immutable value built once, by discovery from
sysfs (`nri_resmgr.topology.discover`), from a synthetic spec
(`nri_resmgr.topology.synthetic`) or by a test by hand.  It holds one `CPU` record per
logical CPU and one `NumaNode` record per NUMA node; everything else (packages, dies,
L2/L3 domains, physical cores) is implied by the ids in the CPU records.  Those ids are
machine-unique: whoever builds the records (normally discovery) numbers dies, cores and
caches across the whole machine, because the kernel's own `core_id`/`die_id` repeat in
every package.

The query methods answer the questions a pool tree asks (which packages, which dies in a
package, which nodes and L3 domains in a die, the threads of a core, the memory nodes
that belong next to a CPU node).  They are computed once in `__post_init__` into private
indexes; the value stays immutable and hashable-free (it holds mappings).  Only *online*
CPUs take part in the queries; offline CPUs may be present with ``online=False`` so that
a report can show them.

Memory nodes without CPUs (PMEM, HBM, CXL expanders) are attached to the CPU node that
is closest by the firmware distance table (`closest_cpu_node`), ties broken by the lower
node id, the way nri-plugins attaches such zones to the closest NUMA pool.

The module is pure: no files, no sockets, no clock.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from nri_resmgr.model import MemoryKind, ResmgrError
from nri_resmgr.topology.cpuset import CPUSet, IDSet, NodeSet

__all__ = [
    "CPU",
    "CoreType",
    "MemoryKind",
    "NetDevice",
    "NumaNode",
    "PCIDevice",
    "Topology",
    "TopologyError",
]

#: distance the kernel reports from a node to itself, and the default remote distance
LOCAL_DISTANCE = 10
REMOTE_DISTANCE = 20


class TopologyError(ResmgrError):
    """A topology that is inconsistent, or a query about something it does not have."""


class CoreType:
    """The `CPU.core_type` values (plain strings, so that specs and JSON stay readable)."""

    NONE = ""
    PERFORMANCE = "performance"
    EFFICIENT = "efficient"


@dataclass(frozen=True, slots=True)
class CPU:
    """One logical CPU (hardware thread) with machine-unique topology ids."""

    id: int
    package_id: int
    die_id: int
    node_id: int
    core_id: int
    l2_id: int
    l3_id: int
    online: bool = True
    isolated: bool = False
    core_type: str = ""


@dataclass(frozen=True, slots=True)
class NumaNode:
    """One NUMA node: its CPUs (empty for CPU-less memory), memory and distances."""

    id: int
    cpus: CPUSet
    memory_bytes: int
    kind: MemoryKind = MemoryKind.DRAM
    #: distance to every node, in ascending node-id order of `Topology.nodes`; may be ()
    distances: tuple[int, ...] = ()
    #: huge page size in KiB -> number of pages
    hugepages: Mapping[int, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NetDevice:
    """A network device and the NUMA node its PCI function sits on (None if unknown)."""

    name: str
    node_id: int | None
    pci_address: str = ""


@dataclass(frozen=True, slots=True)
class PCIDevice:
    """A PCI function and where it sits: its ``local_cpulist`` and ``numa_node``."""

    #: the bus address, ``0000:3b:00.0``
    address: str
    #: its sysfs directory, ``/sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0``
    path: str
    #: the CPUs the kernel calls local to it (empty if unknown)
    cpus: CPUSet = field(default_factory=IDSet)
    #: its NUMA node (None if unknown or not NUMA-aware)
    node_id: int | None = None


def _index(pairs: Iterable[tuple[int, int]]) -> dict[int, IDSet]:
    acc: dict[int, set[int]] = {}
    for key, value in pairs:
        acc.setdefault(key, set()).add(value)
    return {k: IDSet(v) for k, v in sorted(acc.items())}


@dataclass(frozen=True, slots=True)
class Topology:
    """The whole machine. Build it with mappings keyed by CPU id and node id."""

    cpus: Mapping[int, CPU]
    nodes: Mapping[int, NumaNode]
    netdevs: tuple[NetDevice, ...] = ()
    #: where the topology came from (path, spec), for messages; not part of equality
    source: str = field(default="", compare=False)
    #: the PCI functions discovery found (the locality of devices a policy may name)
    pci_devices: tuple[PCIDevice, ...] = ()

    # derived indexes (online CPUs only); not part of equality
    _online: CPUSet = field(init=False, repr=False, compare=False)
    _isolated: CPUSet = field(init=False, repr=False, compare=False)
    _pkg_cpus: dict[int, CPUSet] = field(init=False, repr=False, compare=False)
    _die_cpus: dict[int, CPUSet] = field(init=False, repr=False, compare=False)
    _die_pkg: dict[int, int] = field(init=False, repr=False, compare=False)
    _node_cpus: dict[int, CPUSet] = field(init=False, repr=False, compare=False)
    _l2_cpus: dict[int, CPUSet] = field(init=False, repr=False, compare=False)
    _l3_cpus: dict[int, CPUSet] = field(init=False, repr=False, compare=False)
    _l3_die: dict[int, int] = field(init=False, repr=False, compare=False)
    _core_cpus: dict[int, CPUSet] = field(init=False, repr=False, compare=False)
    _node_order: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        cpus = {k: self.cpus[k] for k in sorted(self.cpus)}
        nodes = {k: self.nodes[k] for k in sorted(self.nodes)}
        for key, cpu in cpus.items():
            if key != cpu.id:
                raise TopologyError(
                    f"topology {self.source or '<unnamed>'}: cpus[{key}] holds the record of "
                    f"cpu {cpu.id}; expected the key to be the CPU id"
                )
            if cpu.node_id not in nodes:
                raise TopologyError(
                    f"topology {self.source or '<unnamed>'}: cpu {cpu.id} is on node "
                    f"{cpu.node_id}; expected one of nodes {sorted(nodes)}"
                )
        for key, node in nodes.items():
            if key != node.id:
                raise TopologyError(
                    f"topology {self.source or '<unnamed>'}: nodes[{key}] holds the record of "
                    f"node {node.id}; expected the key to be the node id"
                )
            if node.distances and len(node.distances) != len(nodes):
                raise TopologyError(
                    f"topology {self.source or '<unnamed>'}: node {node.id} has "
                    f"{len(node.distances)} distances; expected {len(nodes)} (one per node)"
                )
        online = [c for c in cpus.values() if c.online]
        s = object.__setattr__
        s(self, "cpus", MappingProxyType(cpus))
        s(self, "nodes", MappingProxyType(nodes))
        s(self, "netdevs", tuple(self.netdevs))
        s(self, "pci_devices", tuple(self.pci_devices))
        s(self, "_online", IDSet(c.id for c in online))
        s(self, "_isolated", IDSet(c.id for c in online if c.isolated))
        s(self, "_pkg_cpus", _index((c.package_id, c.id) for c in online))
        s(self, "_die_cpus", _index((c.die_id, c.id) for c in online))
        s(self, "_die_pkg", {c.die_id: c.package_id for c in online})
        s(self, "_node_cpus", _index((c.node_id, c.id) for c in online))
        s(self, "_l2_cpus", _index((c.l2_id, c.id) for c in online))
        s(self, "_l3_cpus", _index((c.l3_id, c.id) for c in online))
        s(self, "_l3_die", {c.l3_id: c.die_id for c in online})
        s(self, "_core_cpus", _index((c.core_id, c.id) for c in online))
        s(self, "_node_order", tuple(nodes))

    def __reduce__(self) -> tuple[type[Topology], tuple[object, ...]]:
        """Pickle through the constructor (read-only mapping views do not pickle)."""
        return (
            Topology,
            (dict(self.cpus), dict(self.nodes), self.netdevs, self.source, self.pci_devices),
        )

    def __copy__(self) -> Topology:
        return self  # immutable: a copy is the value itself

    def __deepcopy__(self, memo: dict[int, object]) -> Topology:
        return self

    # ---- CPUs -------------------------------------------------------------------------

    def online_cpus(self) -> CPUSet:
        """All online CPUs."""
        return self._online

    def isolated_cpus(self) -> CPUSet:
        """Online CPUs the kernel isolates (isolcpus)."""
        return self._isolated

    def offline_cpus(self) -> CPUSet:
        """CPUs that are known but offline."""
        return IDSet(c.id for c in self.cpus.values() if not c.online)

    def cpu(self, cpu: int) -> CPU:
        """The record of one CPU."""
        try:
            return self.cpus[cpu]
        except KeyError:
            raise self._unknown("cpu", cpu, self.cpus) from None

    def core_type_cpus(self, core_type: str) -> CPUSet:
        """Online CPUs of one core type (``performance``, ``efficient``, or ``""``)."""
        return IDSet(c for c in self._online if self.cpus[c].core_type == core_type)

    # ---- packages and dies -----------------------------------------------------------

    def package_ids(self) -> list[int]:
        return list(self._pkg_cpus)

    def package_cpus(self, pkg: int) -> CPUSet:
        return self._lookup("package", pkg, self._pkg_cpus)

    def package_nodes(self, pkg: int) -> NodeSet:
        """NUMA nodes with (online) CPUs in the package."""
        return self.nodes_of(self.package_cpus(pkg))

    def die_ids(self, pkg: int | None = None) -> list[int]:
        """Machine-unique die ids, all of them or those of one package."""
        if pkg is None:
            return list(self._die_cpus)
        self.package_cpus(pkg)
        return [d for d, p in sorted(self._die_pkg.items()) if p == pkg]

    def die_cpus(self, die: int) -> CPUSet:
        return self._lookup("die", die, self._die_cpus)

    def die_nodes(self, die: int) -> NodeSet:
        return self.nodes_of(self.die_cpus(die))

    def die_package(self, die: int) -> int:
        self.die_cpus(die)
        return self._die_pkg[die]

    # ---- NUMA nodes ------------------------------------------------------------------

    def node_ids(self, *, with_cpus: bool | None = None) -> list[int]:
        """Node ids; ``with_cpus=True`` only nodes with online CPUs, ``False`` only CPU-less."""
        if with_cpus is None:
            return list(self._node_order)
        return [n for n in self._node_order if (n in self._node_cpus) == with_cpus]

    def node(self, node: int) -> NumaNode:
        try:
            return self.nodes[node]
        except KeyError:
            raise self._unknown("node", node, self.nodes) from None

    def node_cpus(self, node: int) -> CPUSet:
        """Online CPUs of a node (empty for a CPU-less node)."""
        self.node(node)
        return self._node_cpus.get(node, IDSet())

    def nodes_of(self, cpus: CPUSet) -> NodeSet:
        """The nodes the given CPUs are on."""
        return IDSet(self.cpu(c).node_id for c in cpus)

    def nodes_of_kind(self, kind: MemoryKind) -> NodeSet:
        return IDSet(n.id for n in self.nodes.values() if n.kind == kind)

    def node_memory(self, nodes: Iterable[int]) -> int:
        """Total memory of the given nodes, in bytes."""
        return sum(self.node(n).memory_bytes for n in nodes)

    def distance(self, a: int, b: int) -> int:
        """Firmware distance between two nodes (10 to itself, 20 when the table is absent)."""
        na = self.node(a)
        self.node(b)
        if not na.distances:
            return LOCAL_DISTANCE if a == b else REMOTE_DISTANCE
        return na.distances[self._node_order.index(b)]

    def closest_cpu_node(self, node: int) -> int:
        """The node itself if it has CPUs; else the nearest node with CPUs (lower id on ties)."""
        self.node(node)
        if node in self._node_cpus:
            return node
        candidates = list(self._node_cpus)
        if not candidates:
            raise TopologyError(
                f"topology {self.source or '<unnamed>'}: node {node} has no CPUs and no node "
                f"has any online CPU; expected at least one CPU node to attach it to"
            )
        return min(candidates, key=lambda n: (self.distance(node, n), n))

    def memory_nodes_near(self, node: int, kinds: Collection[MemoryKind]) -> NodeSet:
        """Memory of the given kinds that belongs to CPU node `node`.

        That is the node itself when its kind is in `kinds`, plus every CPU-less node of
        one of those kinds whose `closest_cpu_node` is `node`.
        """
        own = self.node(node)
        out = {node} if own.kind in kinds else set()
        for n in self._node_order:
            if n in self._node_cpus or n == node:
                continue
            if self.nodes[n].kind in kinds and self.closest_cpu_node(n) == node:
                out.add(n)
        return IDSet(out)

    # ---- caches and cores ------------------------------------------------------------

    def l2_ids(self) -> list[int]:
        return list(self._l2_cpus)

    def l2_cpus(self, l2: int) -> CPUSet:
        return self._lookup("L2 cache", l2, self._l2_cpus)

    def l3_ids(self, die: int | None = None) -> list[int]:
        """Machine-unique L3 ids, all of them or those shared by CPUs of one die."""
        if die is None:
            return list(self._l3_cpus)
        dcpus = self.die_cpus(die)
        return [l3 for l3, cpus in self._l3_cpus.items() if not cpus.isdisjoint(dcpus)]

    def l3_cpus(self, l3: int) -> CPUSet:
        return self._lookup("L3 cache", l3, self._l3_cpus)

    def l3_nodes(self, l3: int) -> NodeSet:
        return self.nodes_of(self.l3_cpus(l3))

    def core_ids(self) -> list[int]:
        """Machine-unique ids of physical cores with at least one online thread."""
        return list(self._core_cpus)

    def core_cpus(self, core: int) -> CPUSet:
        """The online SMT threads of a core."""
        return self._lookup("core", core, self._core_cpus)

    def siblings(self, cpu: int) -> CPUSet:
        """The online threads on the same core as `cpu`, including `cpu` if online."""
        return self.core_cpus(self.cpu(cpu).core_id)

    def cores_of(self, cpus: CPUSet) -> dict[int, CPUSet]:
        """Core id -> the threads of that core that are in `cpus` (online ones only)."""
        acc: dict[int, set[int]] = {}
        for c in cpus:
            rec = self.cpu(c)
            if rec.online:
                acc.setdefault(rec.core_id, set()).add(c)
        return {k: IDSet(v) for k, v in sorted(acc.items())}

    def threads_per_core(self) -> int:
        """The largest number of online threads on any core (1 without SMT, 0 without CPUs)."""
        return max((len(v) for v in self._core_cpus.values()), default=0)

    # ---- helpers ---------------------------------------------------------------------

    def _lookup(self, what: str, key: int, table: Mapping[int, CPUSet]) -> CPUSet:
        try:
            return table[key]
        except KeyError:
            raise self._unknown(what, key, table) from None

    def _unknown(self, what: str, key: int, table: Iterable[int]) -> TopologyError:
        return TopologyError(
            f"topology {self.source or '<unnamed>'}: no {what} {key}; "
            f"expected one of {IDSet(table) or 'none'}"
        )
