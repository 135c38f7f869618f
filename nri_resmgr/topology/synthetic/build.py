"""Building the `Topology` a synthetic spec describes.

Theory of operation: `build_topology` lays the spec's counts out as CPUs (numbered the
Linux way or QEMU's, only the ``present`` ones), NUMA nodes (CPU nodes first, then the
extra memory nodes in spec order), the distances between them (10 to itself, 11 within a
die, 12 within a package, 21 across; an extra node farther by its kind unless its
``distances`` say otherwise), and a PCI function for each network device (at
`pci_path`, where `write_sysfs` writes it).  The result is what ``discover()`` returns
for the sysfs tree `write_sysfs` writes from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nri_resmgr.model import MemoryKind
from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.model import CPU, CoreType, NetDevice, NumaNode, PCIDevice, Topology
from nri_resmgr.topology.synthetic.spec import TopologySpec, parse_spec

__all__ = ["build_topology", "pci_path"]

#: firmware distance from an extra memory node to the CPU node it is attached to
_KIND_DISTANCE = {MemoryKind.PMEM: 17, MemoryKind.HBM: 13, MemoryKind.CXL: 14}


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
