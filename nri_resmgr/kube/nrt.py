"""A truthful NodeResourceTopology: NUMA zones with what is still free, and the attributes
a NUMA-aware scheduler reads.

Theory of operation: `NodeUse` is what the node report needs to know of the policy's
frozen state, in policy-neutral terms: the CPUs the policy places containers on
(`allowed`), the reserved ones, every container's `Holding` (the CPUs it holds
exclusively, the memory nodes its memory is pinned to and how many bytes it pins), the
pods running, the alignment the policy gives (`Alignment`) and the pool zones it shows
(`PoolZone`).  `nri_resmgr.kube.policy_view.read_node_use` is the one function that reads
a policy's state into it.  From a `NodeUse` and the `Topology`, `numa_zones` and
`node_fields` are pure:

- one zone per NUMA node, ``node-N`` of type ``Node`` (node-feature-discovery's names),
  with its distances as costs;
- ``cpu``: capacity is the node's CPUs; allocatable those of them the policy may grant,
  less the reserved and the kernel-isolated ones; available is allocatable less every
  CPU held exclusively (an exclusive grant on an isolated or reserved CPU takes nothing
  from allocatable, so it takes nothing from available either).  Shared (Burstable,
  BestEffort) use is not subtracted: as with the kubelet's CPU manager, a scheduler counts
  it against the node's allocatable, and only exclusive CPUs are NUMA-bound;
- ``memory``: capacity and allocatable the node's memory; available less the bytes pinned
  to it.  A container pinned to several nodes counts against each in proportion to the
  node's memory (the remainder on its lowest node); a container free to use every memory
  node pins nothing;
- ``hugepages-<size>`` per size the node has (discovery reads them), capacity =
  allocatable = available, in bytes: nothing here tracks huge page requests.

Quantities are Kubernetes quantities: plain integers for whole CPUs and bytes, ``Nm``
for millicores.  The top-level attributes are `Alignment`'s ``topologyManagerPolicy`` and
``topologyManagerScope`` (what scheduler-plugins' NodeResourceTopologyMatch reads; the
mapping from policies is in `policy_view` and docs/operations.md) and the pods
fingerprint (`fingerprint`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nri_resmgr.kube.fingerprint import ATTRIBUTE, METHOD_ALL, METHOD_ATTRIBUTE, pods_fingerprint
from nri_resmgr.topology.cpuset import CPUSet, IDSet, NodeSet, union
from nri_resmgr.topology.model import Topology

__all__ = [
    "Alignment",
    "Holding",
    "NodeUse",
    "PoolZone",
    "node_fields",
    "numa_zones",
    "pinned_memory",
    "quantity",
    "zone_name",
]

#: the kubelet topology manager policies and scopes NodeResourceTopologyMatch knows
MANAGER_POLICIES = ("none", "best-effort", "restricted", "single-numa-node")
MANAGER_SCOPES = ("container", "pod")


@dataclass(frozen=True, slots=True)
class Alignment:
    """The kubelet topology manager policy and scope that say what the policy aligns."""

    policy: str = "none"
    scope: str = "container"

    def __post_init__(self) -> None:
        if self.policy not in MANAGER_POLICIES:
            raise ValueError(
                f"topology manager policy: expected one of {', '.join(MANAGER_POLICIES)}, "
                f"found {self.policy!r}"
            )
        if self.scope not in MANAGER_SCOPES:
            raise ValueError(
                f"topology manager scope: expected one of {', '.join(MANAGER_SCOPES)}, "
                f"found {self.scope!r}"
            )


@dataclass(frozen=True, slots=True)
class Holding:
    """What one container takes from the NUMA zones."""

    namespace: str
    pod: str
    container: str
    #: CPUs it holds alone (exclusive, isolated, the whole-CPU part of mixed)
    exclusive: CPUSet
    #: the memory nodes its memory is pinned to (empty: not pinned)
    mems: NodeSet
    #: the bytes it pins there
    memory: int


@dataclass(frozen=True, slots=True)
class PoolZone:
    """A zone of the policy's own (a pool): nri-plugins shows these beside NUMA zones."""

    name: str
    type: str
    parent: str
    #: resource name -> (capacity, allocatable, available), already quantities
    resources: Mapping[str, tuple[str, str, str]]
    attributes: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class NodeUse:
    """The policy's state as the node report needs it (module docstring)."""

    policy: str
    allowed: CPUSet
    reserved: CPUSet
    holdings: tuple[Holding, ...] = ()
    #: (namespace, name) of every pod the runtime runs, for the fingerprint
    pods: tuple[tuple[str, str], ...] = ()
    alignment: Alignment = Alignment()
    pools: tuple[PoolZone, ...] = ()


def zone_name(node: int) -> str:
    """The NUMA zone of `node` (node-feature-discovery's ``node-N``)."""
    return f"node-{node}"


def quantity(milli: int) -> str:
    """`milli` thousandths as a Kubernetes quantity: ``"2"`` or ``"1500m"``."""
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def pinned_memory(topology: Topology, holdings: Sequence[Holding]) -> dict[int, int]:
    """Bytes pinned to each memory node (module docstring: split by node memory)."""
    every = IDSet(topology.nodes)
    out: dict[int, int] = {}
    for h in holdings:
        nodes = [n for n in sorted(h.mems & every)]
        if not h.memory or not nodes or IDSet(nodes) == every:
            continue
        total = sum(topology.nodes[n].memory_bytes for n in nodes)
        shares = [
            h.memory * topology.nodes[n].memory_bytes // total if total else h.memory // len(nodes)
            for n in nodes
        ]
        shares[0] += h.memory - sum(shares)
        for n, share in zip(nodes, shares, strict=True):
            out[n] = out.get(n, 0) + share
    return out


def _hugepage_name(size_kib: int) -> str:
    if size_kib % (1 << 20) == 0:
        return f"hugepages-{size_kib >> 20}Gi"
    if size_kib % (1 << 10) == 0:
        return f"hugepages-{size_kib >> 10}Mi"
    return f"hugepages-{size_kib}Ki"


def _resource(name: str, capacity: int, allocatable: int, available: int) -> dict[str, str]:
    return {
        "name": name,
        "capacity": str(capacity),
        "allocatable": str(allocatable),
        "available": str(max(available, 0)),
    }


def numa_zones(topology: Topology, use: NodeUse) -> list[dict[str, Any]]:
    """One ``Node`` zone per NUMA node with its free CPUs and memory (module docstring)."""
    held = union(h.exclusive for h in use.holdings)
    grantable = use.allowed - use.reserved - topology.isolated_cpus()
    pinned = pinned_memory(topology, use.holdings)
    zones = []
    for nid in topology.node_ids():
        node = topology.nodes[nid]
        resources = []
        if node.cpus:
            allocatable = node.cpus & grantable
            free = allocatable - held
            resources.append(_resource("cpu", len(node.cpus), len(allocatable), len(free)))
        memory = node.memory_bytes
        resources.append(_resource("memory", memory, memory, memory - pinned.get(nid, 0)))
        for size, pages in sorted(node.hugepages.items()):
            total = size * 1024 * pages
            resources.append(_resource(_hugepage_name(size), total, total, total))
        zones.append(
            {
                "name": zone_name(nid),
                "type": "Node",
                "costs": [
                    {"name": zone_name(o), "value": topology.distance(nid, o)}
                    for o in topology.node_ids()
                ],
                "attributes": [{"name": "memory-kind", "value": str(node.kind)}],
                "resources": resources,
            }
        )
    return zones


def _pool_zone(z: PoolZone) -> dict[str, Any]:
    out: dict[str, Any] = {"name": z.name, "type": z.type}
    if z.parent:
        out["parent"] = z.parent
    out["resources"] = [
        {"name": name, "capacity": c, "allocatable": a, "available": v}
        for name, (c, a, v) in z.resources.items()
    ]
    out["attributes"] = [{"name": k, "value": v} for k, v in z.attributes]
    return out


def node_fields(topology: Topology, use: NodeUse) -> dict[str, Any]:
    """The report's fields (zones and attributes) for `use` on `topology`."""
    return {
        "topologyPolicies": [_legacy_policy(use.alignment)],
        "zones": numa_zones(topology, use) + [_pool_zone(z) for z in use.pools],
        "attributes": [
            {"name": "topologyManagerPolicy", "value": use.alignment.policy},
            {"name": "topologyManagerScope", "value": use.alignment.scope},
            {"name": ATTRIBUTE, "value": pods_fingerprint(use.pods)},
            {"name": METHOD_ATTRIBUTE, "value": METHOD_ALL},
            {"name": "nri-resmgr.packages", "value": str(len(topology.package_ids()))},
        ],
    }


#: the deprecated ``topologyPolicies`` field's values (older schedulers read only it)
_LEGACY = {
    ("none", "container"): "None",
    ("none", "pod"): "None",
    ("best-effort", "container"): "BestEffortContainerLevel",
    ("best-effort", "pod"): "BestEffortPodLevel",
    ("restricted", "container"): "RestrictedContainerLevel",
    ("restricted", "pod"): "RestrictedPodLevel",
    ("single-numa-node", "container"): "SingleNUMANodeContainerLevel",
    ("single-numa-node", "pod"): "SingleNUMANodePodLevel",
}


def _legacy_policy(a: Alignment) -> str:
    return _LEGACY[(a.policy, a.scope)]
