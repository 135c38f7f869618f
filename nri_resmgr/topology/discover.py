"""Topology discovery from sysfs: the only place that reads the machine.

Theory of operation: `discover(root)` reads the sysfs tree under ``<root>/sys`` (``root``
is ``/`` on a node, ``/host`` in a container with the host's ``/sys`` mounted there, or a
directory with an unpacked snapshot in tests) and returns an immutable `Topology`.

CPUs.  Every ``sys/devices/system/cpu/cpuN`` directory (restricted to the ``possible``
list when there is one) is a CPU.  A CPU is online unless its ``cpuN/online`` says ``0``
or, without that file, it is missing from ``cpu/online``.  ``cpu/isolated`` marks the
isolated ones.  ``topology/physical_package_id``, ``die_id`` and ``core_id`` are read
when present (missing → 0; without ``core_id`` the ``core_cpus_list`` or
``thread_siblings_list`` names the core, else the CPU is a core of its own); since the
kernel numbers dies and cores per package, discovery renumbers them machine-wide: a
die is the index of its ``(package, die_id)`` pair in sorted order, a core the index of
its ``(package, die_id, core_id)`` triple.  A node with CPUs whose CPUs are all offline
is still a DRAM node.  L2 and L3 domains come from
``cache/index*/{level,type,shared_cpu_list}`` (data and unified caches only; an index of
another level is read no further than its ``level``) and are numbered by their sorted
CPU lists; a CPU without such a cache gets the domain of its core (L2) or die (L3).
Hybrid parts list their P- and E-core CPUs in ``sys/devices/cpu_core/cpus`` and
``sys/devices/cpu_atom/cpus``.

Nodes.  Every ``sys/devices/system/node/nodeN`` is a node; a CPU belongs to the node whose
``nodeN`` link sits in its CPU directory, else to the node whose ``cpulist`` names it.
``meminfo`` gives ``MemTotal``; ``distance`` the firmware distances in node-id order;
``hugepages/hugepages-<size>kB/nr_hugepages`` the reserved huge pages.  A machine
without a ``node`` directory (a kernel without NUMA) is one node 0 holding every CPU and
the memory ``proc/meminfo`` gives.

Memory kinds.  A node with CPUs is DRAM.  A CPU-less node is classified by the first
rule that applies:

1. PMEM when it is the ``target_node`` of an NVDIMM region (``sys/bus/nd/devices/region*``).
2. CXL when it is the ``target_node`` of a CXL region (``sys/bus/cxl/devices/region*`` or
   anything below it, two levels deep).
3. HBM when the ACPI HMAT performance data (``nodeN/access0/initiators/read_bandwidth``)
   gives it a higher read bandwidth than every node with CPUs; PMEM when lower (far
   memory).
4. Otherwise it is far memory of unknown make: HBM when it is smaller than the average
   DRAM node (HBM comes in small stacks beside each die; this is also nri-plugins' rule),
   else PMEM.  A CPU-less node is by definition at a non-local distance from every CPU,
   so "far" needs no further test.

``nodeN/memory_side_cache`` is not used: it describes a cache *in front of* a node's
memory (DRAM caching PMEM in 2LM, HBM caching DRAM), not what the node itself is.

Network devices.  Every ``sys/class/net/<name>`` with a ``device`` link is a physical
device; ``device/numa_node`` (``-1`` means unknown) and the PCI address are recorded: the
nearest PCI function at or above the device (a virtio NIC's device is ``virtio0``, whose
parent is the PCI function; its name is not an address).  Only when ``root`` is ``/``
the link names come from netlink (pyroute2, so that the daemon sees the devices of its
own network namespace); snapshot roots never touch the host.

PCI functions.  Every directory named like a PCI address under ``sys/devices/pci*``
(functions behind bridges nest below them; symlinks are not followed) is recorded with
its ``local_cpulist`` and ``numa_node``: `nri_resmgr.topology.locality` answers from
them which CPUs are close to a device a policy names (balloons' ``preferCloseToDevices``).

Missing files degrade to defaults; a file that is present but malformed raises
`DiscoveryError` naming the file, what was expected and what was found.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

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

__all__ = ["DiscoveryError", "discover", "discover_topology"]

_CPU_DIR = re.compile(r"cpu(\d+)")
_NODE_DIR = re.compile(r"node(\d+)")
_CACHE_INDEX_DIR = re.compile(r"index(\d+)")
_HUGEPAGES_DIR = re.compile(r"hugepages-(\d+)kB")
_MEMTOTAL = re.compile(r"^Node\s+\d+\s+MemTotal:\s+(\d+)\s*kB\s*$", re.MULTILINE)
#: the machine-wide ``/proc/meminfo`` line, for kernels without NUMA
_PROC_MEMTOTAL = re.compile(r"^MemTotal:\s+(\d+)\s*kB\s*$", re.MULTILINE)
#: a PCI function: domain:bus:device.function (the domain may be wider than four digits)
_PCI_ADDRESS = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
#: bounds of the walk for PCI functions (bridges nest a few levels deep)
_MAX_PCI_FUNCTIONS = 4096
_MAX_PCI_DEPTH = 16


class DiscoveryError(TopologyError):
    """A sysfs file is present but does not hold what the kernel writes there."""


# ---- file readers --------------------------------------------------------------------


#: what one read asks for: more than a sysfs attribute can hold (one page)
_CHUNK = 8192


def _read(path: Path | str) -> str | None:
    """The stripped text of a file, or None when it does not exist or cannot be read."""
    # a file descriptor and string paths: some 12 files per CPU, and `Path.read_text`
    # with `Path` joins made a 224-thread machine's discovery 2-3 times slower; `open()`
    # adds two fstat calls and a second read per file (6 system calls against 3)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:  # missing
        return None
    try:
        data = os.read(fd, _CHUNK)
        if len(data) == _CHUNK:  # a short read is the end of a sysfs, proc or plain file
            parts = [data]
            while chunk := os.read(fd, _CHUNK):
                parts.append(chunk)
            data = b"".join(parts)
    except OSError:  # a directory, an attribute the driver refuses to show
        return None
    finally:
        os.close(fd)
    return data.decode("utf-8", errors="replace").strip()


def _read_int(path: Path | str, default: int | None = None) -> int | None:
    text = _read(path)
    if text is None:
        return default
    try:
        return int(text, 10)
    except ValueError:
        raise DiscoveryError(f"{path}: expected an integer, found {text!r}") from None


def _read_set(path: Path | str) -> CPUSet | None:
    text = _read(path)
    if text is None:
        return None
    try:
        return _parse_list(text)
    except IDSetError as exc:
        raise DiscoveryError(
            f"{path}: expected a kernel id list like '0-3,8', found {text!r}"
        ) from exc


#: once per distinct text: the CPUs of one L2 or L3 cache name the same list
_parse_list = functools.lru_cache(maxsize=4096)(IDSet.parse)


def _numbered(directory: Path, pattern: re.Pattern[str]) -> dict[int, Path]:
    """Entries of `directory` whose names match `pattern` (one int group), by number."""
    return {n: Path(p) for n, p in _numbered_paths(str(directory), pattern).items()}


def _numbered_paths(directory: str, pattern: re.Pattern[str]) -> dict[int, str]:
    """`_numbered` as string paths: the per-CPU walk makes some 450 of them on a
    224-thread machine, and a `Path` join costs several times a string's."""
    out: dict[int, str] = {}
    try:
        names = os.listdir(directory)
    except OSError:
        return out
    for name in names:
        m = pattern.fullmatch(name)
        if m:
            out[int(m.group(1))] = f"{directory}/{name}"
    return dict(sorted(out.items()))


# ---- CPUs ----------------------------------------------------------------------------


def _cpu_node(cpu_dir: str) -> int | None:
    links = _numbered_paths(cpu_dir, _NODE_DIR)
    return next(iter(links), None)


#: the cache levels that make domains (`CPU.l2_id`, `CPU.l3_id`)
_DOMAIN_LEVELS = frozenset((2, 3))


def _caches(cpu_dir: str) -> dict[int, CPUSet]:
    """Level -> CPUs sharing this CPU's data or unified L2 or L3 cache.

    ``level`` is read first: an L1 (two of a CPU's four caches on most machines) makes no
    domain, so its ``type`` and ``shared_cpu_list`` are not read (a quarter of the files
    discovery reads on a 224-thread machine)."""
    out: dict[int, CPUSet] = {}
    for index in _numbered_paths(f"{cpu_dir}/cache", _CACHE_INDEX_DIR).values():
        level = _read_int(f"{index}/level")
        if level not in _DOMAIN_LEVELS:
            continue
        kind = _read(f"{index}/type")
        shared = _read_set(f"{index}/shared_cpu_list")
        if shared is None or kind == "Instruction":
            continue
        out[level] = out.get(level, IDSet()) | shared
    return out


def _renumber(keys: Iterable[tuple[int, ...]]) -> dict[tuple[int, ...], int]:
    """Machine-unique numbers for keys: their index in sorted order."""
    return {k: i for i, k in enumerate(sorted(set(keys)))}


@dataclass(frozen=True, slots=True)
class _RawCPU:
    """What sysfs says about one CPU, before machine-wide renumbering."""

    pkg: int
    die: tuple[int, int]  # (package, package-local die id)
    core: tuple[int, ...]  # (package, die id, core id), or a key of its own
    node: int
    online: bool
    caches: dict[int, CPUSet]


def _read_cpu(cid: int, cdir: str, *, online_list: CPUSet | None, node: int) -> _RawCPU:
    topo = f"{cdir}/topology"
    flag = _read_int(f"{cdir}/online")
    online = flag != 0 if flag is not None else online_list is None or cid in online_list
    pkg = max(_read_int(f"{topo}/physical_package_id", 0) or 0, 0)  # -1 on some hypervisors
    die = max(_read_int(f"{topo}/die_id", 0) or 0, 0)
    core = _read_int(f"{topo}/core_id")
    if core is not None:
        core_key: tuple[int, ...] = (pkg, die, core)
    else:
        # no core id: the sibling list names the core (its lowest CPU), else the CPU is a
        # core of its own; either way numbered after the cores with ids
        siblings = _read_set(f"{topo}/core_cpus_list") or _read_set(f"{topo}/thread_siblings_list")
        core_key = (pkg, die, 1 << 30, min(siblings) if siblings else cid)
    return _RawCPU(
        pkg=pkg,
        die=(pkg, die),
        core=core_key,
        node=node,
        online=online,
        caches=_caches(cdir),
    )


def _discover_cpus(
    sys_dir: Path, *, node_of: Mapping[int, int], default_node: int, numa: bool
) -> dict[int, CPU]:
    cpu_root = sys_dir / "devices" / "system" / "cpu"
    dirs = _numbered_paths(str(cpu_root), _CPU_DIR)
    possible = _read_set(cpu_root / "possible")
    if possible:
        dirs = {i: d for i, d in dirs.items() if i in possible}
    online_list = _read_set(cpu_root / "online")
    isolated = _read_set(cpu_root / "isolated") or IDSet()
    p_cores = _read_set(sys_dir / "devices" / "cpu_core" / "cpus") or IDSet()
    e_cores = _read_set(sys_dir / "devices" / "cpu_atom" / "cpus") or IDSet()

    raw: dict[int, _RawCPU] = {}
    for cid, cdir in dirs.items():
        node = _cpu_node(cdir) if numa else default_node
        raw[cid] = _read_cpu(
            cid,
            cdir,
            online_list=online_list,
            node=node if node is not None else node_of.get(cid, default_node),
        )

    die_no = _renumber(r.die for r in raw.values())
    core_no = _renumber(r.core for r in raw.values())
    core_cpus: dict[tuple[int, ...], set[int]] = {}
    die_cpus: dict[tuple[int, ...], set[int]] = {}
    for cid, r in raw.items():
        core_cpus.setdefault(r.core, set()).add(cid)
        die_cpus.setdefault(r.die, set()).add(cid)

    def cache_key(cid: int, level: int) -> tuple[int, ...]:
        shared = raw[cid].caches.get(level)
        if shared is not None and cid in shared:
            return tuple(shared)
        # no such cache: the core (L2) or the die (L3) stands in for it
        group = core_cpus[raw[cid].core] if level == 2 else die_cpus[raw[cid].die]
        return tuple(sorted(group))

    l2_keys = {cid: cache_key(cid, 2) for cid in raw}
    l3_keys = {cid: cache_key(cid, 3) for cid in raw}
    l2_no = _renumber(l2_keys.values())
    l3_no = _renumber(l3_keys.values())

    cpus: dict[int, CPU] = {}
    for cid, r in raw.items():
        core_type = (
            CoreType.PERFORMANCE
            if cid in p_cores
            else CoreType.EFFICIENT
            if cid in e_cores
            else CoreType.NONE
        )
        cpus[cid] = CPU(
            id=cid,
            package_id=r.pkg,
            die_id=die_no[r.die],
            node_id=r.node,
            core_id=core_no[r.core],
            l2_id=l2_no[l2_keys[cid]],
            l3_id=l3_no[l3_keys[cid]],
            online=r.online,
            isolated=cid in isolated,
            core_type=core_type,
        )
    return cpus


# ---- nodes ---------------------------------------------------------------------------


def _meminfo_total(path: Path, *, pattern: re.Pattern[str] = _MEMTOTAL) -> int:
    text = _read(path)
    if text is None:
        return 0
    m = pattern.search(text)
    if m is None:
        line = "Node N MemTotal: <kB> kB" if pattern is _MEMTOTAL else "MemTotal: <kB> kB"
        raise DiscoveryError(f"{path}: expected a line '{line}', found {text[:80]!r}...")
    return int(m.group(1)) * 1024


def _hugepages(node_dir: Path) -> dict[int, int]:
    out: dict[int, int] = {}
    for size, d in _numbered(node_dir / "hugepages", _HUGEPAGES_DIR).items():
        count = _read_int(d / "nr_hugepages")
        if count is not None:
            out[size] = count
    return out


def _distances(path: Path, count: int) -> tuple[int, ...]:
    text = _read(path)
    if text is None:
        return ()
    try:
        values = tuple(int(v, 10) for v in text.split())
    except ValueError:
        raise DiscoveryError(f"{path}: expected distances like '10 21', found {text!r}") from None
    if len(values) != count:
        raise DiscoveryError(
            f"{path}: expected {count} distances (one per node), found {len(values)}: {text!r}"
        )
    return values


def _target_nodes(base: Path, depth: int) -> set[int]:
    """Values of every ``target_node`` file at most `depth` directories below `base`."""
    out: set[int] = set()
    if not base.is_dir():
        return out
    stack = [(base, 0)]
    while stack:
        d, level = stack.pop()
        value = _read_int(d / "target_node")
        if value is not None and value >= 0:
            out.add(value)
        if level < depth:
            try:
                children = sorted(d.iterdir())
            except OSError:
                continue
            stack.extend((c, level + 1) for c in children if c.is_dir() and not c.is_symlink())
    return out


def _region_nodes(bus: Path, depth: int) -> set[int]:
    out: set[int] = set()
    for region in _numbered(bus, re.compile(r"region(\d+)")).values():
        out |= _target_nodes(region, depth)
    return out


def _classify(
    sys_dir: Path,
    node_dirs: Mapping[int, Path],
    cpu_nodes: set[int],
    memory: Mapping[int, int],
) -> dict[int, MemoryKind]:
    pmem = _region_nodes(sys_dir / "bus" / "nd" / "devices", 0)
    cxl = _region_nodes(sys_dir / "bus" / "cxl" / "devices", 2)
    bandwidth = {
        n: _read_int(d / "access0" / "initiators" / "read_bandwidth") for n, d in node_dirs.items()
    }
    dram_bw = [bw for n, bw in bandwidth.items() if n in cpu_nodes and bw]
    dram_mem = [memory[n] for n in cpu_nodes if n in memory]
    dram_avg = sum(dram_mem) / len(dram_mem) if dram_mem else 0.0
    kinds: dict[int, MemoryKind] = {}
    for n in node_dirs:
        bw = bandwidth[n]
        if n in cpu_nodes:
            kinds[n] = MemoryKind.DRAM
        elif n in pmem:
            kinds[n] = MemoryKind.PMEM
        elif n in cxl:
            kinds[n] = MemoryKind.CXL
        elif bw and dram_bw and bw > max(dram_bw):
            kinds[n] = MemoryKind.HBM
        elif bw and dram_bw and bw < min(dram_bw):
            kinds[n] = MemoryKind.PMEM
        elif memory.get(n, 0) < dram_avg:
            kinds[n] = MemoryKind.HBM
        else:
            kinds[n] = MemoryKind.PMEM
    return kinds


# ---- network devices -----------------------------------------------------------------


def _netlink_names() -> list[str] | None:
    """Link names of this network namespace from netlink, or None without pyroute2."""
    try:
        from pyroute2 import IPRoute
    except ImportError:  # pragma: no cover - pyroute2 is a dependency
        return None
    try:
        with IPRoute() as ipr:
            return sorted(str(link.get_attr("IFLA_IFNAME")) for link in ipr.get_links())
    except Exception:  # netlink unavailable (seccomp, no CAP): fall back to sysfs
        return None


def _discover_netdevs(sys_dir: Path, *, use_netlink: bool) -> tuple[NetDevice, ...]:
    net = sys_dir / "class" / "net"
    names = _netlink_names() if use_netlink else None
    if names is None:
        try:
            names = sorted(os.listdir(net))
        except OSError:
            return ()
    out: list[NetDevice] = []
    for name in names:
        dev = net / name / "device"
        if not os.path.lexists(dev):
            continue  # virtual device (lo, bridges, veths)
        pci_dir = _pci_function(dev)
        node = _read_int(dev / "numa_node")
        if node is None and pci_dir is not None:
            node = _read_int(pci_dir / "numa_node")
        out.append(
            NetDevice(
                name=name,
                node_id=node if node is not None and node >= 0 else None,
                pci_address=pci_dir.name if pci_dir is not None else "",
            )
        )
    return tuple(out)


def _pci_function(dev: Path) -> Path | None:
    """The PCI function a network device's ``device`` link leads to or sits below.

    A NIC's ``device`` is its PCI function (``.../0000:3b:00.0``); a virtio NIC's is the
    virtio device (``.../0000:00:03.0/virtio0``), a child of the PCI function, so the
    nearest ancestor named like a PCI address is the one.  None for a device on no PCI
    bus, or a link that does not resolve.
    """
    real = Path(os.path.realpath(dev))
    for candidate in (real, *real.parents):
        if _PCI_ADDRESS.fullmatch(candidate.name):
            return candidate
    return None


def _discover_pci(sys_dir: Path) -> tuple[PCIDevice, ...]:
    """Every PCI function under ``devices/pci*`` (bridges' functions nest below them)."""
    out: list[PCIDevice] = []
    devices = sys_dir / "devices"
    try:
        buses = sorted(d for d in devices.iterdir() if d.name.startswith("pci"))
    except OSError:
        return ()
    todo = [(bus, 0) for bus in buses]
    while todo and len(out) < _MAX_PCI_FUNCTIONS:
        directory, depth = todo.pop()
        try:
            children = sorted(
                e
                for e in directory.iterdir()
                if _PCI_ADDRESS.fullmatch(e.name) and not e.is_symlink()
            )
        except OSError:
            continue
        for fn in children:
            node = _read_int(fn / "numa_node")
            out.append(
                PCIDevice(
                    address=fn.name,
                    path="/sys/" + fn.relative_to(sys_dir).as_posix(),
                    cpus=_read_set(fn / "local_cpulist") or IDSet(),
                    node_id=node if node is not None and node >= 0 else None,
                )
            )
            if depth < _MAX_PCI_DEPTH:
                todo.append((fn, depth + 1))
    return tuple(sorted(out, key=lambda f: f.path))


# ---- entry point ---------------------------------------------------------------------


def discover(root: Path | str = "/", *, netlink: bool | None = None) -> Topology:
    """Read the topology of the machine whose sysfs is at ``<root>/sys``.

    ``netlink`` says where network device names come from: netlink (pyroute2, the
    caller's own network namespace) or the files under ``sys/class/net``. The default is
    netlink exactly when ``root`` is ``/``; a snapshot root never touches the host.
    """
    root_path = Path(root)
    sys_dir = root_path / "sys"
    if not (sys_dir / "devices" / "system" / "cpu").is_dir():
        raise DiscoveryError(
            f"{sys_dir}: expected a sysfs tree with devices/system/cpu, found "
            f"{'no such directory' if not sys_dir.exists() else 'no devices/system/cpu'}"
        )
    node_root = sys_dir / "devices" / "system" / "node"
    node_dirs = _numbered(node_root, _NODE_DIR)
    node_of: dict[int, int] = {}
    for nid, ndir in node_dirs.items():
        for c in _read_set(ndir / "cpulist") or IDSet():
            node_of.setdefault(c, nid)
    default_node = min(node_dirs) if node_dirs else 0
    cpus = _discover_cpus(sys_dir, node_of=node_of, default_node=default_node, numa=bool(node_dirs))

    if not node_dirs:
        nodes = {
            0: NumaNode(
                id=0,
                cpus=IDSet(cpus),
                memory_bytes=_meminfo_total(root_path / "proc" / "meminfo", pattern=_PROC_MEMTOTAL),
                kind=MemoryKind.DRAM,
                distances=(),
                hugepages={},
            )
        }
    else:
        memory = {n: _meminfo_total(d / "meminfo") for n, d in node_dirs.items()}
        node_cpus: dict[int, set[int]] = {n: set() for n in node_dirs}
        for cpu in cpus.values():
            if cpu.node_id not in node_cpus:
                raise DiscoveryError(
                    f"{sys_dir / 'devices/system/cpu' / f'cpu{cpu.id}'}: cpu {cpu.id} is "
                    f"linked to node {cpu.node_id}; expected one of nodes {IDSet(node_dirs)}"
                )
            node_cpus[cpu.node_id].add(cpu.id)
        # a node whose CPUs are all offline is still a CPU node (DRAM), not far memory
        with_cpus = {n for n, members in node_cpus.items() if members}
        kinds = _classify(sys_dir, node_dirs, with_cpus, memory)
        nodes = {
            n: NumaNode(
                id=n,
                cpus=IDSet(node_cpus[n]),
                memory_bytes=memory[n],
                kind=kinds[n],
                distances=_distances(d / "distance", len(node_dirs)),
                hugepages=_hugepages(d),
            )
            for n, d in node_dirs.items()
        }
    use_netlink = root_path.resolve() == Path("/") if netlink is None else netlink
    netdevs = _discover_netdevs(sys_dir, use_netlink=use_netlink)
    return Topology(
        cpus=cpus,
        nodes=nodes,
        netdevs=netdevs,
        pci_devices=_discover_pci(sys_dir),
        source=f"sysfs:{root_path}",
    )


#: the verb-style name the style guide prefers; same function
discover_topology = discover
