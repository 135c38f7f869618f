"""Synthetic machines: a topology from a short spec, and a sysfs tree from a topology.

Theory of operation: a `TopologySpec` describes a regular machine by counts, each *per
parent level*: ``packages`` sockets, each with ``dies`` dies, each die with ``nodes``
NUMA nodes, each node with ``cores`` physical cores of ``threads`` hardware threads and
``memory`` bytes of DRAM.  So ``{packages: 2, dies: 1, nodes: 2, cores: 2, threads: 2}``
is 2 x 1 x 2 x 2 = 8 cores and 16 CPUs.  Optional fields: ``l3_per_die`` (L3 domains
per die, default 1, must divide the die's cores), ``isolated`` and ``offline`` (kernel
CPU lists), ``efficient_cpus`` (CPU list of E-cores; the rest become P-cores),
``hugepages`` (page size → count, per CPU node), ``extra_memory_nodes`` (CPU-less PMEM,
HBM or CXL nodes, each ``attach``-ed to the CPU node it is closest to), ``netdevs``,
``numbering`` and ``present`` (below).

Numbering (``numbering: linux``, the default) follows Linux on Intel servers: cores are
numbered package by package, die by die, node by node; CPU ``t * total_cores + core`` is
thread ``t`` of ``core``, so thread 0 of every core comes first and CPU N and
N + total_cores are siblings.  ``numbering: qemu`` follows QEMU's ``-smp`` guests (the
machines of nri-plugins' e2e suite): CPU ``core * threads + t``, so the threads of one core
are adjacent ids.  ``present`` (a CPU list, default all) keeps only those CPUs, the way a
guest booted with fewer CPUs than ``maxcpus`` and then hot-plugged some shows them: the
others do not exist, and a node left without CPUs keeps its memory.

Node ids follow the cores; extra memory nodes come after all CPU nodes, in spec order.
Distances are 10 to itself, 11 within a die, 12 within a package, 21 across packages; an
extra node is 17 (PMEM), 13 (HBM) or 14 (CXL) from its CPU node and that much farther
from the others, unless its ``distances`` (node id → distance, symmetric, the form of
QEMU's ``node-dist``) say otherwise.

`build_topology(spec)` makes the `Topology` directly.  `write_sysfs(spec_or_topology,
root)` writes the files `discover()` reads, in the kernel's formats, under ``root/sys``,
so that ``discover(root) == build_topology(spec)``: the daemon and its tests run on such
roots.  Memory kinds are written the way real machines show them: PMEM as an NVDIMM
region's ``target_node``, CXL as a CXL region's dax device ``target_node``, HBM through
HMAT read bandwidth above DRAM's.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from nri_resmgr.model import MemoryKind
from nri_resmgr.topology.cpuset import CPUSet, IDSet, IDSetError
from nri_resmgr.topology.model import (
    CPU,
    CoreType,
    NetDevice,
    NumaNode,
    PCIDevice,
    Topology,
    TopologyError,
)

__all__ = [
    "ExtraMemoryNode",
    "NetDeviceSpec",
    "SpecError",
    "TopologySpec",
    "build_topology",
    "parse_size",
    "parse_spec",
    "write_sysfs",
]

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}
_SIZE = re.compile(r"^\s*(\d+)\s*([kmgtp]?)(i?b?)\s*$", re.IGNORECASE)

#: firmware distance from an extra memory node to the CPU node it is attached to
_KIND_DISTANCE = {MemoryKind.PMEM: 17, MemoryKind.HBM: 13, MemoryKind.CXL: 14}
#: HMAT read bandwidth (MB/s) written for each kind, so discovery can tell HBM from DRAM
_KIND_BANDWIDTH = {
    MemoryKind.DRAM: 100_000,
    MemoryKind.HBM: 400_000,
    MemoryKind.CXL: 50_000,
    MemoryKind.PMEM: 20_000,
}
_MAX_CPUS = 8192


class SpecError(TopologyError):
    """A synthetic topology spec that does not validate."""


def parse_size(value: object) -> int:
    """Bytes from an int or a size string like ``2G``, ``512Mi``, ``4096k`` (binary units)."""
    if isinstance(value, bool):
        raise ValueError(f"expected a size like 2G or a byte count, found {value!r}")
    if isinstance(value, int):
        size = value
    elif isinstance(value, str):
        m = _SIZE.match(value)
        if not m:
            raise ValueError(f"expected a size like 2G, 512Mi or 1048576, found {value!r}")
        size = int(m.group(1)) * _UNITS[m.group(2).lower()]
    else:
        raise ValueError(f"expected a size like 2G or a byte count, found {value!r}")
    if size < 0:
        raise ValueError(f"expected a non-negative size, found {value!r}")
    return size - size % 1024  # meminfo counts whole KiB


def _id_list(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if isinstance(value, list | tuple):
        value = ",".join(str(v) for v in value)
    if not isinstance(value, str):
        raise ValueError(f"expected a CPU list like '2-3,8', found {value!r}")
    try:
        return str(IDSet.parse(value))
    except IDSetError as exc:
        raise ValueError(str(exc)) from exc


def _page_size_kib(value: object) -> int:
    return parse_size(value) // 1024 if isinstance(value, str) else int(str(value))


def _hugepages(value: object) -> dict[int, int]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"expected a mapping of page size to count, found {value!r}")
    out: dict[int, int] = {}
    for k, v in value.items():
        size = _page_size_kib(k)
        if size <= 0 or isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"expected page size (e.g. 2M) -> count >= 0, found {k!r}: {v!r}")
        out[size] = v
    return out


Size = Annotated[int, BeforeValidator(parse_size)]
IDList = Annotated[str, BeforeValidator(_id_list)]
HugePages = Annotated[dict[int, int], BeforeValidator(_hugepages)]


class ExtraMemoryNode(BaseModel):
    """A CPU-less memory node, attached to (closest to) one CPU node."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: MemoryKind
    memory: Size
    attach: int = Field(default=0, ge=0)
    #: node id -> distance to that node (both ways); unnamed nodes get the computed one
    distances: dict[int, Annotated[int, Field(ge=11, le=254)]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _not_dram(self) -> ExtraMemoryNode:
        if self.kind == MemoryKind.DRAM:
            raise ValueError(
                "extra memory nodes are CPU-less: expected kind pmem, hbm or cxl, found dram"
            )
        return self


class NetDeviceSpec(BaseModel):
    """A physical network device on a NUMA node."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    node: int | None = None
    pci: str = Field(default="", pattern=r"^([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])?$")


class TopologySpec(BaseModel):
    """A regular machine; counts are per parent level (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    packages: int = Field(default=1, ge=1, le=64)
    dies: int = Field(default=1, ge=1, le=64)
    nodes: int = Field(default=1, ge=1, le=64)
    cores: int = Field(default=4, ge=1, le=1024)
    threads: int = Field(default=2, ge=1, le=8)
    memory: Size = Field(default=4 << 30)
    l3_per_die: int = Field(default=1, ge=1)
    isolated: IDList = ""
    offline: IDList = ""
    efficient_cpus: IDList = ""
    hugepages: HugePages = Field(default_factory=dict)
    extra_memory_nodes: tuple[ExtraMemoryNode, ...] = ()
    netdevs: tuple[NetDeviceSpec, ...] = ()
    numbering: Literal["linux", "qemu"] = "linux"
    present: IDList = ""

    @property
    def total_cores(self) -> int:
        return self.packages * self.dies * self.nodes * self.cores

    @property
    def total_cpus(self) -> int:
        return self.total_cores * self.threads

    @property
    def cpu_nodes(self) -> int:
        return self.packages * self.dies * self.nodes

    @model_validator(mode="after")
    def _consistent(self) -> TopologySpec:
        if self.total_cpus > _MAX_CPUS:
            raise ValueError(
                f"expected at most {_MAX_CPUS} CPUs, found {self.total_cpus} "
                f"({self.packages}x{self.dies}x{self.nodes}x{self.cores}x{self.threads})"
            )
        per_die = self.nodes * self.cores
        if per_die % self.l3_per_die:
            raise ValueError(
                f"l3_per_die: expected a divisor of the {per_die} cores of a die, "
                f"found {self.l3_per_die}"
            )
        for name in ("isolated", "offline", "efficient_cpus", "present"):
            ids = IDSet.parse(getattr(self, name))
            if ids and max(ids) >= self.total_cpus:
                raise ValueError(
                    f"{name}: expected CPUs within 0-{self.total_cpus - 1}, found {ids}"
                )
        present = IDSet.parse(self.present)
        if present and 0 not in present:
            raise ValueError(f"present: expected a CPU list including cpu0, found {present}")
        if present and IDSet.parse(self.offline) - present:
            raise ValueError(
                f"offline: expected present CPUs ({present}), "
                f"found {IDSet.parse(self.offline) - present} not present"
            )
        if 0 in IDSet.parse(self.offline):
            raise ValueError(
                "offline: expected CPUs other than 0 (cpu0 cannot go offline), found 0"
            )
        for i, extra in enumerate(self.extra_memory_nodes):
            if extra.attach >= self.cpu_nodes:
                raise ValueError(
                    f"extra_memory_nodes[{i}].attach: expected a CPU node 0-{self.cpu_nodes - 1}, "
                    f"found {extra.attach}"
                )
        total_nodes = self.cpu_nodes + len(self.extra_memory_nodes)
        explicit: dict[tuple[int, int], int] = {}
        for i, extra in enumerate(self.extra_memory_nodes):
            own = self.cpu_nodes + i
            for other, dist in sorted(extra.distances.items()):
                if not 0 <= other < total_nodes or other == own:
                    raise ValueError(
                        f"extra_memory_nodes[{i}].distances: expected other node ids "
                        f"0-{total_nodes - 1} (not its own id {own}), found {other}"
                    )
                key = (min(own, other), max(own, other))
                if explicit.setdefault(key, dist) != dist:
                    raise ValueError(
                        f"extra_memory_nodes[{i}].distances: node {own} to {other} is "
                        f"{explicit[key]} on the other side; expected the same, found {dist}"
                    )
        names = [d.name for d in self.netdevs]
        if len(set(names)) != len(names):
            raise ValueError(f"netdevs: expected unique names, found {names}")
        for d in self.netdevs:
            if d.node is not None and d.node >= total_nodes:
                raise ValueError(
                    f"netdevs {d.name}: expected node within 0-{total_nodes - 1}, found {d.node}"
                )
        return self

    def describe(self) -> str:
        """A short inline form, for `Topology.source` and messages."""
        extra = "" if self.numbering == "linux" else f",numbering={self.numbering}"
        return (
            f"packages={self.packages},dies={self.dies},nodes={self.nodes},"
            f"cores={self.cores},threads={self.threads}{extra}"
        )


class PCIDeviceSpec(BaseModel):
    """A PCI function on a NUMA node, with the device nodes a container may be given.

    `char` / `block` are ``MAJOR:MINOR`` of a character device (under the function's
    ``misc/NAME``) and a block device (``nvme/nvme0/NAME``); `node` None writes
    ``numa_node`` -1 (not NUMA-aware); `local_cpus` defaults to the node's CPUs.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    pci: str = Field(pattern=r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    node: int | None = None
    local_cpus: IDList | None = None
    char: str | None = Field(default=None, pattern=r"^[1-9][0-9]*:[0-9]+$")
    block: str | None = Field(default=None, pattern=r"^[1-9][0-9]*:[0-9]+$")
    #: block devices this one is built on (``slaves/``), by their names
    slaves: tuple[str, ...] = ()


def _format_errors(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        msg = str(err["msg"]).removeprefix("Value error, ")
        found = err.get("input")
        shown = "" if isinstance(found, dict) or "found" in msg else f" (found {found!r})"
        parts.append(f"{loc}: {msg}{shown}" if loc else f"{msg}{shown}")
    return "; ".join(parts)


def parse_spec(spec: Mapping[str, Any] | TopologySpec, *, origin: str = "spec") -> TopologySpec:
    """Validate a spec mapping; errors become `SpecError` naming the field and value."""
    if isinstance(spec, TopologySpec):
        return spec
    if not isinstance(spec, Mapping):
        raise SpecError(
            f"topology {origin}: expected a mapping of fields, found {type(spec).__name__}"
        )
    try:
        return TopologySpec.model_validate(dict(spec))
    except ValidationError as exc:
        raise SpecError(f"topology {origin}: {_format_errors(exc)}") from exc


# ---- building ------------------------------------------------------------------------


def _cpu_distance(spec: TopologySpec, a: int, b: int) -> int:
    if a == b:
        return 10
    die_a, die_b = a // spec.nodes, b // spec.nodes
    if die_a == die_b:
        return 11
    if die_a // spec.dies == die_b // spec.dies:
        return 12
    return 21


def build_topology(spec: Mapping[str, Any] | TopologySpec, *, source: str = "") -> Topology:
    """The `Topology` a spec describes."""
    s = parse_spec(spec)
    total = s.total_cores
    per_pkg = s.dies * s.nodes * s.cores
    per_die = s.nodes * s.cores
    per_l3 = per_die // s.l3_per_die
    isolated = IDSet.parse(s.isolated)
    offline = IDSet.parse(s.offline)
    efficient = IDSet.parse(s.efficient_cpus)
    present = IDSet.parse(s.present)
    cpus: dict[int, CPU] = {}
    for core in range(total):
        pkg = core // per_pkg
        die = core // per_die
        node = core // s.cores
        l3 = die * s.l3_per_die + (core % per_die) // per_l3
        for t in range(s.threads):
            cid = core * s.threads + t if s.numbering == "qemu" else t * total + core
            if present and cid not in present:
                continue
            ctype = CoreType.NONE
            if efficient:
                ctype = CoreType.EFFICIENT if cid in efficient else CoreType.PERFORMANCE
            cpus[cid] = CPU(
                id=cid,
                package_id=pkg,
                die_id=die,
                node_id=node,
                core_id=core,
                l2_id=core,
                l3_id=l3,
                online=cid not in offline,
                isolated=cid in isolated,
                core_type=ctype,
            )
    n_cpu = s.cpu_nodes
    extras = list(s.extra_memory_nodes)
    n_all = n_cpu + len(extras)

    def attach(n: int) -> tuple[int, int]:
        if n < n_cpu:
            return n, 0
        e = extras[n - n_cpu]
        return e.attach, _KIND_DISTANCE[e.kind] - 10

    explicit: dict[tuple[int, int], int] = {}
    for i, e in enumerate(extras):
        for other, dist in e.distances.items():
            explicit[(n_cpu + i, other)] = explicit[(other, n_cpu + i)] = dist

    def distance(a: int, b: int) -> int:
        if a == b:
            return 10
        if (a, b) in explicit:
            return explicit[(a, b)]
        (ca, oa), (cb, ob) = attach(a), attach(b)
        return _cpu_distance(s, ca, cb) + oa + ob

    node_cpus: dict[int, set[int]] = {n: set() for n in range(n_all)}
    for c in cpus.values():
        node_cpus[c.node_id].add(c.id)
    nodes: dict[int, NumaNode] = {}
    for n in range(n_all):
        cpu_node = n < n_cpu
        nodes[n] = NumaNode(
            id=n,
            cpus=IDSet(node_cpus[n]),
            memory_bytes=s.memory if cpu_node else extras[n - n_cpu].memory,
            kind=MemoryKind.DRAM if cpu_node else extras[n - n_cpu].kind,
            distances=tuple(distance(n, m) for m in range(n_all)),
            hugepages=dict(s.hugepages) if cpu_node else {},
        )
    netdevs = tuple(
        NetDevice(name=d.name, node_id=d.node, pci_address=d.pci or f"0000:{0x10 + i:02x}:00.0")
        for i, d in enumerate(s.netdevs)
    )
    # each network device sits on a PCI function of its own (as `write_sysfs` writes it)
    functions = tuple(
        PCIDevice(address=d.pci_address, path=pci_path(d.pci_address), node_id=d.node_id)
        for d in netdevs
    )
    return Topology(
        cpus=cpus,
        nodes=nodes,
        netdevs=netdevs,
        pci_devices=tuple(sorted(functions, key=lambda f: f.path)),
        source=source or f"spec:{s.describe()}",
    )


def pci_path(address: str) -> str:
    """The sysfs directory a synthetic PCI function at `address` is written to (on a
    root bus of its own: ``/sys/devices/pci0000:BB/ADDRESS``)."""
    return f"/sys/devices/pci0000:{address.split(':')[1]}/{address}"


# ---- writing sysfs -------------------------------------------------------------------


def _put(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n", encoding="utf-8")


def _link(path: Path, target: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if os.path.lexists(path):
        path.unlink()
    os.symlink(target, path)


def _group(topo: Topology, key: str) -> dict[int, CPUSet]:
    acc: dict[int, set[int]] = {}
    for c in topo.cpus.values():
        acc.setdefault(getattr(c, key), set()).add(c.id)
    return {k: IDSet(v) for k, v in acc.items()}


def write_sysfs(
    source: Topology | TopologySpec | Mapping[str, Any],
    root: Path | str,
    *,
    devices: Sequence[PCIDeviceSpec | Mapping[str, Any]] = (),
) -> Topology:
    """Write the sysfs files `discover()` reads for a topology (or spec) under ``root/sys``.

    Returns the topology written.  For topologies with canonical ids (those built by
    `build_topology` or `discover`), ``discover(root)`` returns an equal topology.
    `devices` adds PCI functions with device nodes (`write_pci_devices`), which
    `topology.devices` resolves to topology hints.
    """
    topo = source if isinstance(source, Topology) else build_topology(source)
    sys_dir = Path(root) / "sys"
    cpu_root = sys_dir / "devices" / "system" / "cpu"
    node_root = sys_dir / "devices" / "system" / "node"
    all_cpus = IDSet(topo.cpus)
    online = topo.online_cpus()
    _put(cpu_root / "possible", str(all_cpus))
    _put(cpu_root / "present", str(all_cpus))
    _put(cpu_root / "online", str(online))
    _put(cpu_root / "offline", str(all_cpus - online))
    _put(cpu_root / "isolated", str(IDSet(c.id for c in topo.cpus.values() if c.isolated)))
    _put(cpu_root / "kernel_max", str(max(8191, max(all_cpus, default=0))))

    cores, l2s, l3s = _group(topo, "core_id"), _group(topo, "l2_id"), _group(topo, "l3_id")
    packages, dies = _group(topo, "package_id"), _group(topo, "die_id")
    die_local: dict[int, int] = {}
    for pkg in sorted(packages):
        pkg_dies = sorted({c.die_id for c in topo.cpus.values() if c.package_id == pkg})
        for i, d in enumerate(pkg_dies):
            die_local[d] = i
    for c in topo.cpus.values():
        cdir = cpu_root / f"cpu{c.id}"
        if c.id != 0:
            _put(cdir / "online", "1" if c.online else "0")
        t = cdir / "topology"
        _put(t / "physical_package_id", str(c.package_id))
        _put(t / "die_id", str(die_local[c.die_id]))
        _put(t / "core_id", str(c.core_id))
        siblings = str(cores[c.core_id] & online) if c.online else str(IDSet([c.id]))
        _put(t / "thread_siblings_list", siblings)
        _put(t / "core_cpus_list", siblings)
        _put(t / "package_cpus_list", str(packages[c.package_id] & online))
        _put(t / "die_cpus_list", str(dies[c.die_id] & online))
        caches = (
            (1, "Data", cores[c.core_id], c.core_id),
            (1, "Instruction", cores[c.core_id], c.core_id),
            (2, "Unified", l2s[c.l2_id], c.l2_id),
            (3, "Unified", l3s[c.l3_id], c.l3_id),
        )
        for index, (level, kind, shared, cache_id) in enumerate(caches):
            idir = cdir / "cache" / f"index{index}"
            _put(idir / "level", str(level))
            _put(idir / "type", kind)
            _put(idir / "id", str(cache_id))
            _put(idir / "shared_cpu_list", str(shared))
        _link(cdir / f"node{c.node_id}", f"../../node/node{c.node_id}")

    p_cores = IDSet(c.id for c in topo.cpus.values() if c.core_type == CoreType.PERFORMANCE)
    e_cores = IDSet(c.id for c in topo.cpus.values() if c.core_type == CoreType.EFFICIENT)
    if p_cores:
        _put(sys_dir / "devices" / "cpu_core" / "cpus", str(p_cores))
    if e_cores:
        _put(sys_dir / "devices" / "cpu_atom" / "cpus", str(e_cores))

    node_ids = IDSet(topo.nodes)
    with_cpus = IDSet(n for n in topo.nodes if topo.node_cpus(n))
    with_mem = IDSet(n.id for n in topo.nodes.values() if n.memory_bytes)
    _put(node_root / "possible", str(node_ids))
    _put(node_root / "online", str(node_ids))
    _put(node_root / "has_cpu", str(with_cpus))
    _put(node_root / "has_memory", str(with_mem))
    _put(node_root / "has_normal_memory", str(with_mem))
    region = 0
    for n in topo.nodes.values():
        ndir = node_root / f"node{n.id}"
        _put(ndir / "cpulist", str(n.cpus))
        distances = n.distances or tuple(topo.distance(n.id, m) for m in topo.nodes)
        _put(ndir / "distance", " ".join(str(d) for d in distances))
        kib = n.memory_bytes // 1024
        _put(
            ndir / "meminfo",
            f"Node {n.id} MemTotal:       {kib} kB\n"
            f"Node {n.id} MemFree:        {kib} kB\n"
            f"Node {n.id} MemUsed:        0 kB",
        )
        for size, count in sorted(n.hugepages.items()):
            hdir = ndir / "hugepages" / f"hugepages-{size}kB"
            _put(hdir / "nr_hugepages", str(count))
            _put(hdir / "free_hugepages", str(count))
            _put(hdir / "surplus_hugepages", "0")
        _put(ndir / "access0" / "initiators" / "read_bandwidth", str(_KIND_BANDWIDTH[n.kind]))
        if n.kind == MemoryKind.PMEM and not topo.node_cpus(n.id):
            rdir = sys_dir / "bus" / "nd" / "devices" / f"region{region}"
            _put(rdir / "target_node", str(n.id))
            _put(rdir / "numa_node", str(topo.closest_cpu_node(n.id)))
            region += 1
        elif n.kind == MemoryKind.CXL and not topo.node_cpus(n.id):
            rdir = sys_dir / "bus" / "cxl" / "devices" / f"region{region}"
            _put(rdir / f"dax_region{region}" / f"dax{region}.0" / "target_node", str(n.id))
            region += 1

    for fn in topo.pci_devices:
        fdir = sys_dir / fn.path.removeprefix("/sys/")
        _put(fdir / "numa_node", str(fn.node_id if fn.node_id is not None else -1))
        if fn.cpus:
            _put(fdir / "local_cpulist", str(fn.cpus))
    for i, dev in enumerate(topo.netdevs):
        pci = dev.pci_address or f"0000:{0x10 + i:02x}:00.0"
        bus = pci_path(pci).split("/")[3]
        pdir = sys_dir / "devices" / bus / pci
        _put(pdir / "numa_node", str(dev.node_id if dev.node_id is not None else -1))
        ndir = pdir / "net" / dev.name
        _put(ndir / "ifindex", str(i + 2))
        _link(ndir / "device", "../../../" + pci)
        _link(sys_dir / "class" / "net" / dev.name, f"../../devices/{bus}/{pci}/net/{dev.name}")
    write_pci_devices(topo, root, devices)
    return topo


def write_pci_devices(
    topo: Topology, root: Path | str, devices: Sequence[PCIDeviceSpec | Mapping[str, Any]]
) -> None:
    """Write PCI functions and their device nodes under ``root/sys`` (see `PCIDeviceSpec`).

    ``sys/devices/pci0000:BB/ADDR/{numa_node,local_cpulist}``; a char device under
    ``ADDR/misc/NAME`` and a block device under ``ADDR/nvme/nvme0/NAME``, each with its
    ``dev`` file and its ``sys/dev/{char,block}/MAJOR:MINOR`` symlink.
    """
    sys_dir = Path(root) / "sys"
    specs = [
        d if isinstance(d, PCIDeviceSpec) else PCIDeviceSpec.model_validate(d) for d in devices
    ]
    block_dirs: dict[str, str] = {}
    for d in specs:
        rel = pci_path(d.pci).removeprefix("/sys/")
        pdir = sys_dir / rel
        _put(pdir / "numa_node", str(d.node if d.node is not None else -1))
        if d.local_cpus is not None:
            cpus = IDSet.parse(d.local_cpus)
        else:
            cpus = topo.node_cpus(d.node) if d.node is not None else IDSet()
        if cpus:
            _put(pdir / "local_cpulist", str(cpus))
        if d.char is not None:
            cdir = f"{rel}/misc/{d.name}"
            _put(sys_dir / cdir / "dev", d.char)
            _link(sys_dir / "dev" / "char" / d.char, f"../../{cdir}")
        if d.block is not None:
            bdir = f"{rel}/nvme/nvme0/{d.name}"
            _put(sys_dir / bdir / "dev", d.block)
            _link(sys_dir / "dev" / "block" / d.block, f"../../{bdir}")
            block_dirs[d.name] = bdir
    for d in specs:
        if d.slaves and d.name in block_dirs:
            for slave in d.slaves:
                if slave not in block_dirs:
                    raise SpecError(
                        f"devices {d.name}: slave {slave!r} is not a block device of the "
                        f"spec; expected one of {sorted(block_dirs)}"
                    )
                depth = block_dirs[d.name].count("/") + 2
                _link(
                    sys_dir / block_dirs[d.name] / "slaves" / slave,
                    "../" * depth + block_dirs[slave],
                )
