"""A topology written down exactly: every CPU and NUMA node record, as JSON-ready data.

Theory of operation: a synthetic spec (`synthetic`) describes a regular machine in a few
counts; a live node need not be regular (offline CPUs, odd numbering, sub-NUMA
clustering, CPU-less memory).  `to_record(topology)` writes every `CPU` record as one row
(``[id, package, die, node, core, l2, l3, online, isolated, core_type]``) and every
`NumaNode` with its memory, kind, distances and huge pages, plus the network and PCI
devices; `from_record` reads it back into an equal `Topology`.  It is how
`nri-resmgr dump` carries the node's machine into a scenario, and `load_topology` takes
a mapping with ``cpu_records`` as one.  Bounded: at most `MAX_ID` + 1 CPUs and as many
nodes; errors are `RecordError` naming the field.  Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nri_resmgr.model import MemoryKind
from nri_resmgr.topology.cpuset import MAX_ID, IDSet
from nri_resmgr.topology.model import CPU, NetDevice, NumaNode, PCIDevice, Topology, TopologyError

__all__ = ["RECORD_KEY", "RecordError", "from_record", "is_record", "to_record"]

#: the key that tells a record from a synthetic spec
RECORD_KEY = "cpu_records"

Id = int
CPURow = tuple[Id, Id, Id, Id, Id, Id, Id, bool, bool, str]


class RecordError(TopologyError):
    """A topology record that cannot be read."""


class _NodeRecord(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: int = Field(ge=0, le=MAX_ID)
    cpus: str = Field(default="", max_length=65536)
    memory_bytes: int = Field(ge=0)
    kind: MemoryKind = MemoryKind.DRAM
    distances: tuple[int, ...] = Field(default=(), max_length=MAX_ID + 1)
    hugepages: dict[int, int] = Field(default_factory=dict, max_length=16)


class _NetRecord(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(max_length=256)
    node: int | None = None
    pci_address: str = Field(default="", max_length=64)


class _PCIRecord(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    address: str = Field(max_length=64)
    path: str = Field(max_length=4096)
    cpus: str = Field(default="", max_length=65536)
    node: int | None = None


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str = Field(default="", max_length=4096)
    cpu_records: tuple[CPURow, ...] = Field(min_length=1, max_length=MAX_ID + 1)
    nodes: tuple[_NodeRecord, ...] = Field(min_length=1, max_length=MAX_ID + 1)
    netdevs: tuple[_NetRecord, ...] = Field(default=(), max_length=4096)
    pci_devices: tuple[_PCIRecord, ...] = Field(default=(), max_length=65536)


def is_record(data: Mapping[str, Any]) -> bool:
    """Whether `data` is a record (rather than a synthetic spec)."""
    return RECORD_KEY in data


def to_record(topology: Topology) -> dict[str, Any]:
    """`topology` as JSON-ready data (module docstring)."""
    return {
        "source": topology.source,
        RECORD_KEY: [
            [
                c.id,
                c.package_id,
                c.die_id,
                c.node_id,
                c.core_id,
                c.l2_id,
                c.l3_id,
                c.online,
                c.isolated,
                c.core_type,
            ]
            for c in topology.cpus.values()
        ],
        "nodes": [
            {
                "id": n.id,
                "cpus": str(n.cpus),
                "memory_bytes": n.memory_bytes,
                "kind": str(n.kind),
                "distances": list(n.distances),
                "hugepages": dict(n.hugepages),
            }
            for n in topology.nodes.values()
        ],
        "netdevs": [
            {"name": d.name, "node": d.node_id, "pci_address": d.pci_address}
            for d in topology.netdevs
        ],
        "pci_devices": [
            {"address": f.address, "path": f.path, "cpus": str(f.cpus), "node": f.node_id}
            for f in topology.pci_devices
        ],
    }


def from_record(data: Mapping[str, Any], *, origin: str = "topology record") -> Topology:
    """The `Topology` of a `to_record` mapping; `RecordError` names what does not fit."""
    try:
        rec = _Record.model_validate(dict(data))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'record'}: {e['msg']}"
            for e in exc.errors()[:5]
        )
        raise RecordError(f"{origin}: expected a topology record, found {problems}") from exc
    cpus = {}
    for cid, pkg, die, node, core, l2, l3, online, isolated, core_type in rec.cpu_records:
        if not 0 <= cid <= MAX_ID or min(pkg, die, node, core, l2, l3) < 0:
            raise RecordError(
                f"{origin}: cpu {cid}: expected ids 0-{MAX_ID} and non-negative topology ids"
            )
        cpus[cid] = CPU(cid, pkg, die, node, core, l2, l3, online, isolated, core_type)
    nodes = {
        n.id: NumaNode(
            id=n.id,
            cpus=IDSet.parse(n.cpus),
            memory_bytes=n.memory_bytes,
            kind=n.kind,
            distances=n.distances,
            hugepages=dict(n.hugepages),
        )
        for n in rec.nodes
    }
    try:
        return Topology(
            cpus=cpus,
            nodes=nodes,
            netdevs=tuple(NetDevice(d.name, d.node, d.pci_address) for d in rec.netdevs),
            pci_devices=tuple(
                PCIDevice(f.address, f.path, IDSet.parse(f.cpus), f.node) for f in rec.pci_devices
            ),
            source=rec.source or origin,
        )
    except (TopologyError, ValueError) as exc:  # an IDSetError is a ValueError
        raise RecordError(f"{origin}: {exc}") from exc
