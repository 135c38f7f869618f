"""Writing the sysfs tree of a synthetic machine, in the kernel's formats.

Theory of operation: `write_sysfs(source, root)` writes under ``root/sys`` the files
``discover()`` reads (CPU topology and caches, online/offline/isolated lists, NUMA nodes
with their distances, memory and hugepages, network devices, PCI functions), so that
``discover(root)`` equals the topology written.  Memory kinds are written the way real
machines show them: PMEM as an NVDIMM region's ``target_node``, CXL as a CXL region's
dax device ``target_node``, HBM through HMAT read bandwidth above DRAM's.
`write_pci_devices` adds PCI functions with character and block device nodes
(`PCIDeviceSpec`), which `topology.devices` resolves to topology hints.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nri_resmgr.model import MemoryKind
from nri_resmgr.topology.cpuset import CPUSet, IDSet
from nri_resmgr.topology.model import CoreType, Topology
from nri_resmgr.topology.synthetic.build import build_topology, pci_path
from nri_resmgr.topology.synthetic.spec import (
    PCIDeviceSpec,
    SpecError,
    TopologySpec,
)

__all__ = ["write_pci_devices", "write_sysfs"]

#: HMAT read bandwidth (MB/s) written for each kind, so discovery can tell HBM from DRAM
_KIND_BANDWIDTH = {
    MemoryKind.DRAM: 100_000,
    MemoryKind.HBM: 400_000,
    MemoryKind.CXL: 50_000,
    MemoryKind.PMEM: 20_000,
}


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
