"""Node reporting: pluggable reporters merged into one NodeResourceTopology per cycle.

Theory of operation: a reporter is anything with a `name` and a `report()` returning a
mapping of fields (for the NodeResourceTopology object: `zones`, `attributes`, and any
other top-level field).  The manager asks every reporter, in registration order, and merges
the answers with fixed, deterministic rules (katalyst's reporter manager works the same
way):

- mappings are merged key by key (recursively);
- lists are concatenated, earlier-registered reporters first;
- scalars (and mismatched types): the later-registered reporter wins.

The merged fields become one `topology.node.k8s.io/v1alpha2` NodeResourceTopology object
for this node, written with ONE server-side-apply request per cycle, and only when it
differs from the last object written; writes are at least `min_interval` seconds apart
(`due_in` tells the daemon's report task how long to wait, so changes made meanwhile
are coalesced into the next write).
Building the object is pure (`merge_reports`, `build_nrt`); only `ReportManager.publish`
does IO, through a `KubeClient`.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from nri_resmgr.kube.nrt import NodeUse, node_fields
from nri_resmgr.ops.metrics import StateSnapshot
from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.model import Topology

NRT_GROUP = "topology.node.k8s.io"
NRT_VERSION = "v1alpha2"
NRT_PATH = f"/apis/{NRT_GROUP}/{NRT_VERSION}/noderesourcetopologies"
FIELD_MANAGER = "nri-resmgr"


class Reporter(Protocol):
    @property
    def name(self) -> str: ...

    def report(self) -> Mapping[str, Any]: ...


def merge_value(earlier: Any, later: Any) -> Any:
    """Merge two field values by the manager's rules."""
    if isinstance(earlier, Mapping) and isinstance(later, Mapping):
        out = {k: copy.deepcopy(v) for k, v in earlier.items()}
        for k, v in later.items():
            out[k] = merge_value(out[k], v) if k in out else copy.deepcopy(v)
        return out
    if isinstance(earlier, list) and isinstance(later, list):
        return [*copy.deepcopy(earlier), *copy.deepcopy(later)]
    return copy.deepcopy(later)


def merge_reports(reports: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Merge reporters' answers in registration order."""
    merged: dict[str, Any] = {}
    for report in reports:
        merged = merge_value(merged, report)
    return merged


def build_nrt(node: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """The NodeResourceTopology object for `node` carrying the merged fields."""
    obj: dict[str, Any] = {
        "apiVersion": f"{NRT_GROUP}/{NRT_VERSION}",
        "kind": "NodeResourceTopology",
        "metadata": {"name": node, "labels": {"app.kubernetes.io/managed-by": FIELD_MANAGER}},
        "zones": [],
        "attributes": [],
    }
    for key, value in fields.items():
        if key in ("apiVersion", "kind", "metadata"):
            continue
        obj[key] = copy.deepcopy(value)
    return obj


# -- built-in reporters ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopologyReporter:
    """NUMA zones (capacity, allocatable and what is free), distances, the alignment
    attributes and the pods fingerprint: `nri_resmgr.kube.nrt.node_fields`.

    `use` returns the policy's `NodeUse` (read on the daemon's event loop, between
    events); without it the node is reported idle, every allocatable CPU and byte free.
    """

    topology: Topology
    use: Callable[[], NodeUse] | None = None
    name: str = "topology"

    def report(self) -> Mapping[str, Any]:
        use = self.use() if self.use is not None else idle_use(self.topology)
        return node_fields(self.topology, use)


def idle_use(topology: Topology) -> NodeUse:
    """The `NodeUse` of a node with no policy state: nothing reserved or held."""
    return NodeUse(policy="none", allowed=topology.online_cpus(), reserved=IDSet())


@dataclass(frozen=True, slots=True)
class PoolReporter:
    """The policy's pools: capacity, shared and exclusive CPUs, container counts."""

    snapshot: Callable[[], StateSnapshot]
    policy: str
    name: str = "pools"
    #: add `balloon_zones` of the snapshot (the daemon's TopologyReporter carries the
    #: balloons policy's own zones instead: `nri_resmgr.kube.balloon_view`)
    balloons: bool = True

    def report(self) -> Mapping[str, Any]:
        snap = self.snapshot()
        zones = [
            {
                "name": f"pool-{p.name}",
                "type": "Pool",
                "attributes": [{"name": "containers", "value": str(p.containers)}],
                "resources": [
                    {
                        "name": "cpu",
                        "capacity": str(p.capacity),
                        "allocatable": str(p.capacity),
                        "available": str(p.shared),
                    }
                ],
            }
            for p in snap.pools
        ]
        if self.balloons:
            zones += balloon_zones(snap)
        attrs = [{"name": "nri-resmgr.policy", "value": self.policy}]
        attrs += [
            {"name": f"nri-resmgr.containers.{kind}", "value": str(n)}
            for kind, n in sorted(snap.containers_by_kind.items())
        ]
        return {"zones": zones, "attributes": attrs}


def balloon_zones(snap: StateSnapshot) -> list[dict[str, Any]]:
    """A zone per balloon (type ``balloon``: its CPUs, shared idle CPUs, memory, excess
    millicores, and a composite's component cpusets), and with ``showContainersInNrt`` a
    zone per container in it (type ``allocation for container``, parent the balloon), as
    nri-plugins' balloons policy reports them."""
    zones: list[dict[str, Any]] = []
    for b in snap.balloons:
        components = [{"name": "component cpusets", "value": b.component_cpus}]
        zones.append(
            {
                "name": b.name,
                "type": "balloon",
                "attributes": [
                    {"name": "balloon type", "value": b.type},
                    {"name": "cpuset", "value": b.cpus},
                    {"name": "shared cpuset", "value": b.shared_idle_cpus},
                    {"name": "memory set", "value": b.mems},
                    {"name": "containers", "value": str(len(b.containers))},
                    {"name": "excess cpus", "value": f"{b.excess_milli}m"},
                    *(components if b.component_cpus else []),
                ],
                "resources": [
                    {
                        "name": "cpu",
                        "capacity": str(b.cpu_count),
                        "allocatable": str(b.cpu_count),
                        "available": str(b.cpu_count),
                    }
                ],
            }
        )
        if b.show_containers:
            zones += [
                {"name": c, "type": "allocation for container", "parent": b.name}
                for c in b.containers
            ]
    return zones


@dataclass(frozen=True, slots=True)
class ClassReporter:
    """The RDT and block I/O classes this node offers."""

    rdt_classes: Sequence[str]
    blockio_classes: Sequence[str]
    name: str = "classes"

    def report(self) -> Mapping[str, Any]:
        return {
            "attributes": [
                {"name": "nri-resmgr.rdt-classes", "value": ",".join(sorted(self.rdt_classes))},
                {
                    "name": "nri-resmgr.blockio-classes",
                    "value": ",".join(sorted(self.blockio_classes)),
                },
            ]
        }


class Publisher(Protocol):
    def apply(self, path: str, obj: Mapping[str, Any], *, manager: str) -> dict[str, Any]: ...


class ReportManager:
    """Collects, merges and publishes; at most one API request per cycle."""

    def __init__(
        self,
        node: str,
        publisher: Publisher,
        *,
        min_interval: float = 10.0,
        clock: Callable[[], float],
    ) -> None:
        self.node = node
        self.publisher = publisher
        self.min_interval = min_interval
        self.clock = clock
        self.reporters: list[Reporter] = []
        self.requests = 0
        self._last_written: str | None = None
        self._last_time: float | None = None

    def register(self, reporter: Reporter) -> None:
        if any(r.name == reporter.name for r in self.reporters):
            raise ValueError(f"reporter {reporter.name!r} is already registered")
        self.reporters.append(reporter)

    def collect(self) -> dict[str, Any]:
        return build_nrt(self.node, merge_reports([r.report() for r in self.reporters]))

    def due_in(self) -> float:
        """Seconds until the next request may be made (0: now)."""
        if self._last_time is None:
            return 0.0
        return max(0.0, self._last_time + self.min_interval - self.clock())

    def cycle(self, *, force: bool = False) -> bool:
        """Publish if due and changed; returns whether a request was made."""
        now = self.clock()
        if not force and self._last_time is not None and now - self._last_time < self.min_interval:
            return False
        obj = self.collect()
        encoded = json.dumps(obj, sort_keys=True)
        if encoded == self._last_written:
            return False
        self.publisher.apply(f"{NRT_PATH}/{self.node}", obj, manager=FIELD_MANAGER)
        self.requests += 1
        self._last_written = encoded
        self._last_time = now
        return True
