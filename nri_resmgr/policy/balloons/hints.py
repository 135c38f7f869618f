"""Each balloon type's CPU tree options: its option values and its hints.

Theory of operation: nri-plugins derives, per balloon type, the sets a new or growing
balloon of it keeps close to and far from, and the tree's option values (its own or the
policy's).  `tree_options` does it once per configuration, as theirs does at setConfig:
a type is close to the sets it asks for (the reserved type to its home, then its
``preferCloseToDevices``, ``preferIsolCpus`` to the isolated CPUs, ``preferCoreType`` to
those cores) and far from its ``preferFarFromDevices``, then from every such set it does
not ask for, isolated CPUs first; ``allocatorPriority`` is the final pick's priority
(performance or efficient cores first), and ``loads`` name the levels it keeps off CPUs
under load at.
`allocation` turns these options into picks.
"""

from __future__ import annotations

from nri_resmgr.policy.balloons.allocation import Hint, TreeOptions
from nri_resmgr.policy.balloons.config import ResolvedConfig
from nri_resmgr.policy.balloons.spec import POD_RESOURCE_PREFIX, RESERVED
from nri_resmgr.topology.cpuset import CPUSet
from nri_resmgr.topology.model import CoreType, Topology

__all__ = ["tree_options"]


def tree_options(
    topology: Topology, config: ResolvedConfig, reserved_home: CPUSet
) -> dict[str, TreeOptions]:
    """Every type's `allocation.TreeOptions`: the option values, its own or the
    policy's, and its hints, as nri-plugins derives them: a type is close to the
    sets it asks for (the reserved type to its home, `reserved_home`, then its
    ``preferCloseToDevices``, ``preferIsolCpus`` to the isolated CPUs,
    ``preferCoreType`` to those cores) and far from its ``preferFarFromDevices``,
    then from every such set it does not ask for, isolated CPUs first, then in the
    order the types name them; from the reserved CPUs only when
    ``reservedResources`` names them (a cpuset).  Its ``loads`` give the levels it
    keeps off the CPUs under load at (`sizing.Sizing.loaded`)."""
    topo = topology
    opts = config.options
    available = config.available
    sets: dict[str, CPUSet] = {
        "reserved": reserved_home,
        "isolated": topo.isolated_cpus() & available,
        CoreType.PERFORMANCE: topo.core_type_cpus(CoreType.PERFORMANCE) & available,
        CoreType.EFFICIENT: topo.core_type_cpus(CoreType.EFFICIENT) & available,
    }
    # devices by their sysfs paths, which no name above is
    sets |= {path: cpus & available for path, cpus in config.devices.items()}
    close: dict[str, list[str]] = {}
    for t in config.types:
        wanted = []
        if t.name == RESERVED:
            wanted.append("reserved")
        # the kubelet's devices are the placed container's (`Sizing.for_member`)
        wanted += [d for d in t.prefer_close_to_devices if not d.startswith(POD_RESOURCE_PREFIX)]
        if t.prefer_isol_cpus:
            wanted.append("isolated")
        if t.prefer_core_type in (CoreType.PERFORMANCE, CoreType.EFFICIENT):
            wanted.append(t.prefer_core_type)
        close[t.name] = [d for d in wanted if sets[d]]
    avoided = ["isolated"] if sets["isolated"] else []
    for names in close.values():
        avoided += [d for d in names if d not in avoided]
    if not config.reserved:
        # a quantity: the reserved balloon keeps to its home, others may take it
        avoided = [d for d in avoided if d != "reserved"]
    out = {}
    for t in config.types:
        far = [d for d in t.prefer_far_from_devices if sets[d]]
        far += [d for d in avoided if d not in close[t.name] and d not in far]
        hints = [Hint(sets[d]) for d in close[t.name]]
        hints += [Hint(sets[d], far=True) for d in far]
        loads = [config.load_classes[name] for name in t.loads]
        balancing = t.allocator_topology_balancing
        spread = t.prefer_spread_on_physical_cores
        out[t.name] = TreeOptions(
            balancing=opts.allocator_topology_balancing if balancing is None else balancing,
            spread=opts.prefer_spread_on_physical_cores if spread is None else spread,
            hints=tuple(hints),
            priority=str(t.allocator_priority),
            loads=tuple(dict.fromkeys(lc.level for lc in loads)),
            overloads=any(lc.overloads_level_in_balloon for lc in loads),
        )
    return out
