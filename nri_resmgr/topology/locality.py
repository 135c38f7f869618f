"""The CPUs close to a device named by its sysfs path, answered from the topology model.

Theory of operation: nri-plugins' balloons policy names devices by sysfs path
(``preferCloseToDevices``) and reads their locality from sysfs.  Here the reading is
discovery's (`nri_resmgr.topology.discover` records the PCI functions and network
devices in the `Topology`), and `device_cpus` only looks the path up, so a policy can
ask without doing IO:

* ``/sys/devices/system/node/nodeN``: the online CPUs of node N (nri-plugins reads its
  ``cpulist``);
* ``/sys/devices/system/cpu/cpuN/cache/indexM``: the CPUs sharing that cache with CPU N
  (its ``shared_cpu_list``).  The model keeps caches by level, and the index is read by
  the kernel's x86 numbering: ``index0``/``index1`` the L1 data/instruction caches (the
  core's threads), ``index2`` the L2, ``index3`` the L3;
* ``/sys/bus/pci/devices/ADDRESS``, or the function's own ``/sys/devices/pci.../ADDRESS``
  directory or anything below it: the function's ``local_cpulist``, else the CPUs of its
  ``numa_node``;
* ``/sys/class/net/NAME``: the CPUs of the NUMA node of that network device.

A path it cannot answer gives None (the caller says why that is an error); a path that
names a known place with no online CPU (a CPU-less memory node) gives an empty set.
The module is pure: no files, no sockets, no clock.
"""

from __future__ import annotations

import posixpath
import re

from nri_resmgr.topology.cpuset import CPUSet, IDSet
from nri_resmgr.topology.model import Topology

__all__ = ["device_cpus"]

_NODE = re.compile(r"/sys/devices/system/node/node(\d+)")
_CACHE = re.compile(r"/sys/devices/system/cpu/cpu(\d+)/cache/index(\d+)")
_PCI_BUS = re.compile(r"/sys/bus/pci/devices/([^/]+)")
_NET = re.compile(r"/sys/class/net/([^/]+)")


def _cache_cpus(topology: Topology, cpu: int, index: int) -> CPUSet | None:
    rec = topology.cpus.get(cpu)
    if rec is None or not rec.online:
        return None
    if index in (0, 1):
        return topology.siblings(cpu)
    if index == 2:
        return topology.l2_cpus(rec.l2_id)
    if index == 3:
        return topology.l3_cpus(rec.l3_id)
    return None


def _node_cpus(topology: Topology, node: int | None) -> CPUSet | None:
    if node is None or node not in topology.nodes:
        return None
    return topology.node_cpus(node)


def device_cpus(topology: Topology, path: str) -> CPUSet | None:
    """The online CPUs close to the device at sysfs `path` (module docstring), or None
    when `topology` does not know that path."""
    norm = posixpath.normpath(path) if path.startswith("/") else ""
    if m := _NODE.fullmatch(norm):
        return _node_cpus(topology, int(m[1]))
    if m := _CACHE.fullmatch(norm):
        return _cache_cpus(topology, int(m[1]), int(m[2]))
    if m := _NET.fullmatch(norm):
        dev = next((d for d in topology.netdevs if d.name == m[1]), None)
        return None if dev is None else _node_cpus(topology, dev.node_id)
    bus = _PCI_BUS.fullmatch(norm)
    if bus:
        found = [fn for fn in topology.pci_devices if fn.address == bus[1]]
    else:  # the function's own directory, or the deepest function above the path
        found = [fn for fn in topology.pci_devices if f"{norm}/".startswith(f"{fn.path}/")]
    if not found:
        return None
    fn = max(found, key=lambda f: len(f.path))
    if fn.cpus:
        return fn.cpus & topology.online_cpus()
    return _node_cpus(topology, fn.node_id) or IDSet()
