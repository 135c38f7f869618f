"""The kubelet's devices of a container as CPUs a balloon keeps close to.

Theory of operation: a balloon type's ``preferCloseToDevices`` may name
``podresourceapi:PATTERN`` (nri-plugins #720): the devices the kubelet's device manager
gave the container being placed, by resource name, with ``*``, ``?`` and ``[...]`` as Go's
``path.Match`` (their ``containerDeviceCpus``; a wildcard does not cross ``/``).  The
daemon hands them over as the container's `TopologyHint`\\s from `HintSource.POD_RESOURCES`
(provider ``podresourceapi:<resource>``; `nri_resmgr.kube.podresources`); `kubelet_devices`
keeps those, and `device_hints` turns a type's patterns, in their order, into the close
`Hint`\\s of the balloon that takes that container: the union of the matching devices'
CPUs (or of their NUMA nodes' CPUs), within the available CPUs.  A pattern that matches
nothing, or devices without locality, gives no hint (theirs drops it too).  Pure.
"""

from __future__ import annotations

from collections.abc import Iterable

from nri_resmgr.model import ContainerInfo, HintSource, TopologyHint
from nri_resmgr.policy.balloons.allocation import Hint
from nri_resmgr.policy.balloons.spec import POD_RESOURCE_PREFIX
from nri_resmgr.policy.irq_affinity import irq_pattern_matches
from nri_resmgr.topology.cpuset import CPUSet, IDSet, union
from nri_resmgr.topology.model import Topology

__all__ = ["device_hints", "kubelet_devices", "pod_resource_patterns"]


def pod_resource_patterns(devices: Iterable[str]) -> tuple[str, ...]:
    """The resource patterns of the ``podresourceapi:`` entries of `devices`, in order."""
    return tuple(
        d[len(POD_RESOURCE_PREFIX) :] for d in devices if d.startswith(POD_RESOURCE_PREFIX)
    )


def kubelet_devices(container: ContainerInfo) -> tuple[TopologyHint, ...]:
    """The container's hints from the kubelet's devices."""
    return tuple(h for h in container.topology_hints if h.source is HintSource.POD_RESOURCES)


def device_hints(
    topology: Topology,
    available: CPUSet,
    patterns: Iterable[str],
    devices: Iterable[TopologyHint],
) -> tuple[Hint, ...]:
    """One close hint per pattern of `patterns` that matches some of `devices`."""
    devices = tuple(devices)
    out = []
    for pattern in patterns:
        cpus: list[CPUSet] = []
        for d in devices:
            if irq_pattern_matches(pattern, d.provider[len(POD_RESOURCE_PREFIX) :]):
                nodes = d.nodes & IDSet(topology.nodes)
                cpus.append(d.cpus or union(topology.node_cpus(n) for n in nodes))
        near = union(cpus) & available
        if near:
            out.append(Hint(near))
    return tuple(out)
