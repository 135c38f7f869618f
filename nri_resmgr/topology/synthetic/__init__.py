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

The parts: `spec` validates a spec (`parse_spec`, `TopologySpec`, `SpecError`);
`build` makes the `Topology` it describes; `sysfs` writes the files discovery reads.
This package's face names what the tests, the benchmarks and ``topology.load`` use.

`build_topology(spec)` makes the `Topology` directly.  `write_sysfs(spec_or_topology,
root)` writes the files `discover()` reads, in the kernel's formats, under ``root/sys``,
so that ``discover(root) == build_topology(spec)``: the daemon and its tests run on such
roots.  Memory kinds are written the way real machines show them: PMEM as an NVDIMM
region's ``target_node``, CXL as a CXL region's dax device ``target_node``, HBM through
HMAT read bandwidth above DRAM's.
"""

from nri_resmgr.topology.synthetic.build import build_topology
from nri_resmgr.topology.synthetic.spec import (
    ExtraMemoryNode,
    NetDeviceSpec,
    PCIDeviceSpec,
    SpecError,
    TopologySpec,
    parse_size,
    parse_spec,
)
from nri_resmgr.topology.synthetic.sysfs import write_sysfs

__all__ = [
    "ExtraMemoryNode",
    "NetDeviceSpec",
    "PCIDeviceSpec",
    "SpecError",
    "TopologySpec",
    "build_topology",
    "parse_size",
    "parse_spec",
    "write_sysfs",
]
