"""The synthetic machine spec: a regular machine by counts, validated.

Theory of operation: a `TopologySpec` is a pydantic model of the spec language the
package docstring (`nri_resmgr.topology.synthetic`) describes; each field says what it
accepts and the model's validator checks what the fields say together (CPU lists within
the machine, cpu0 present and online, an L3 count that divides a die's cores, extra
memory nodes attached to a CPU node, distances that agree both ways, unique network
device names).  `parse_spec` turns a mapping into a spec, and a validation error into a
`SpecError` naming the field, what was expected and what was found.  `PCIDeviceSpec`
describes a PCI function with device nodes, for `write_sysfs`.  Nothing here builds or
writes anything.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from nri_resmgr.model import MemoryKind
from nri_resmgr.topology.cpuset import IDSet, IDSetError
from nri_resmgr.topology.model import (
    TopologyError,
)

__all__ = [
    "ExtraMemoryNode",
    "NetDeviceSpec",
    "PCIDeviceSpec",
    "SpecError",
    "TopologySpec",
    "parse_size",
    "parse_spec",
]

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}
_SIZE = re.compile(r"^\s*(\d+)\s*([kmgtp]?)(i?b?)\s*$", re.IGNORECASE)

_MAX_CPUS = 8192


class SpecError(TopologyError):
    """A synthetic topology spec that does not validate."""


def parse_size(value: object) -> int:
    """Bytes from an int or a size string like ``2G``, ``512Mi``, ``4096k`` (binary units)."""
    if isinstance(value, bool):
        raise ValueError(f"expected a size like 2G or a byte count, found {value!r}")
    if isinstance(value, int):
        size = value
    elif isinstance(value, str):
        m = _SIZE.match(value)
        if not m:
            raise ValueError(f"expected a size like 2G, 512Mi or 1048576, found {value!r}")
        size = int(m.group(1)) * _UNITS[m.group(2).lower()]
    else:
        raise ValueError(f"expected a size like 2G or a byte count, found {value!r}")
    if size < 0:
        raise ValueError(f"expected a non-negative size, found {value!r}")
    return size - size % 1024  # meminfo counts whole KiB


def _id_list(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if isinstance(value, list | tuple):
        value = ",".join(str(v) for v in value)
    if not isinstance(value, str):
        raise ValueError(f"expected a CPU list like '2-3,8', found {value!r}")
    try:
        return str(IDSet.parse(value))
    except IDSetError as exc:
        raise ValueError(str(exc)) from exc


def _page_size_kib(value: object) -> int:
    return parse_size(value) // 1024 if isinstance(value, str) else int(str(value))


def _hugepages(value: object) -> dict[int, int]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"expected a mapping of page size to count, found {value!r}")
    out: dict[int, int] = {}
    for k, v in value.items():
        size = _page_size_kib(k)
        if size <= 0 or isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"expected page size (e.g. 2M) -> count >= 0, found {k!r}: {v!r}")
        out[size] = v
    return out


Size = Annotated[int, BeforeValidator(parse_size)]
IDList = Annotated[str, BeforeValidator(_id_list)]
HugePages = Annotated[dict[int, int], BeforeValidator(_hugepages)]


class ExtraMemoryNode(BaseModel):
    """A CPU-less memory node, attached to (closest to) one CPU node."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: MemoryKind
    memory: Size
    attach: int = Field(default=0, ge=0)
    #: node id -> distance to that node (both ways); unnamed nodes get the computed one
    distances: dict[int, Annotated[int, Field(ge=11, le=254)]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _not_dram(self) -> ExtraMemoryNode:
        if self.kind == MemoryKind.DRAM:
            raise ValueError(
                "extra memory nodes are CPU-less: expected kind pmem, hbm or cxl, found dram"
            )
        return self


class NetDeviceSpec(BaseModel):
    """A physical network device on a NUMA node."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    node: int | None = None
    pci: str = Field(default="", pattern=r"^([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])?$")


class TopologySpec(BaseModel):
    """A regular machine; counts are per parent level (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    packages: int = Field(default=1, ge=1, le=64)
    dies: int = Field(default=1, ge=1, le=64)
    nodes: int = Field(default=1, ge=1, le=64)
    cores: int = Field(default=4, ge=1, le=1024)
    threads: int = Field(default=2, ge=1, le=8)
    memory: Size = Field(default=4 << 30)
    l3_per_die: int = Field(default=1, ge=1)
    isolated: IDList = ""
    offline: IDList = ""
    efficient_cpus: IDList = ""
    hugepages: HugePages = Field(default_factory=dict)
    extra_memory_nodes: tuple[ExtraMemoryNode, ...] = ()
    netdevs: tuple[NetDeviceSpec, ...] = ()
    numbering: Literal["linux", "qemu"] = "linux"
    present: IDList = ""

    @property
    def total_cores(self) -> int:
        return self.packages * self.dies * self.nodes * self.cores

    @property
    def total_cpus(self) -> int:
        return self.total_cores * self.threads

    @property
    def cpu_nodes(self) -> int:
        return self.packages * self.dies * self.nodes

    @model_validator(mode="after")
    def _consistent(self) -> TopologySpec:
        if self.total_cpus > _MAX_CPUS:
            raise ValueError(
                f"expected at most {_MAX_CPUS} CPUs, found {self.total_cpus} "
                f"({self.packages}x{self.dies}x{self.nodes}x{self.cores}x{self.threads})"
            )
        per_die = self.nodes * self.cores
        if per_die % self.l3_per_die:
            raise ValueError(
                f"l3_per_die: expected a divisor of the {per_die} cores of a die, "
                f"found {self.l3_per_die}"
            )
        for name in ("isolated", "offline", "efficient_cpus", "present"):
            ids = IDSet.parse(getattr(self, name))
            if ids and max(ids) >= self.total_cpus:
                raise ValueError(
                    f"{name}: expected CPUs within 0-{self.total_cpus - 1}, found {ids}"
                )
        present = IDSet.parse(self.present)
        if present and 0 not in present:
            raise ValueError(f"present: expected a CPU list including cpu0, found {present}")
        if present and IDSet.parse(self.offline) - present:
            raise ValueError(
                f"offline: expected present CPUs ({present}), "
                f"found {IDSet.parse(self.offline) - present} not present"
            )
        if 0 in IDSet.parse(self.offline):
            raise ValueError(
                "offline: expected CPUs other than 0 (cpu0 cannot go offline), found 0"
            )
        for i, extra in enumerate(self.extra_memory_nodes):
            if extra.attach >= self.cpu_nodes:
                raise ValueError(
                    f"extra_memory_nodes[{i}].attach: expected a CPU node 0-{self.cpu_nodes - 1}, "
                    f"found {extra.attach}"
                )
        total_nodes = self.cpu_nodes + len(self.extra_memory_nodes)
        explicit: dict[tuple[int, int], int] = {}
        for i, extra in enumerate(self.extra_memory_nodes):
            own = self.cpu_nodes + i
            for other, dist in sorted(extra.distances.items()):
                if not 0 <= other < total_nodes or other == own:
                    raise ValueError(
                        f"extra_memory_nodes[{i}].distances: expected other node ids "
                        f"0-{total_nodes - 1} (not its own id {own}), found {other}"
                    )
                key = (min(own, other), max(own, other))
                if explicit.setdefault(key, dist) != dist:
                    raise ValueError(
                        f"extra_memory_nodes[{i}].distances: node {own} to {other} is "
                        f"{explicit[key]} on the other side; expected the same, found {dist}"
                    )
        names = [d.name for d in self.netdevs]
        if len(set(names)) != len(names):
            raise ValueError(f"netdevs: expected unique names, found {names}")
        for d in self.netdevs:
            if d.node is not None and d.node >= total_nodes:
                raise ValueError(
                    f"netdevs {d.name}: expected node within 0-{total_nodes - 1}, found {d.node}"
                )
        return self

    def describe(self) -> str:
        """A short inline form, for `Topology.source` and messages."""
        extra = "" if self.numbering == "linux" else f",numbering={self.numbering}"
        return (
            f"packages={self.packages},dies={self.dies},nodes={self.nodes},"
            f"cores={self.cores},threads={self.threads}{extra}"
        )


class PCIDeviceSpec(BaseModel):
    """A PCI function on a NUMA node, with the device nodes a container may be given.

    `char` / `block` are ``MAJOR:MINOR`` of a character device (under the function's
    ``misc/NAME``) and a block device (``nvme/nvme0/NAME``); `node` None writes
    ``numa_node`` -1 (not NUMA-aware); `local_cpus` defaults to the node's CPUs.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    pci: str = Field(pattern=r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    node: int | None = None
    local_cpus: IDList | None = None
    char: str | None = Field(default=None, pattern=r"^[1-9][0-9]*:[0-9]+$")
    block: str | None = Field(default=None, pattern=r"^[1-9][0-9]*:[0-9]+$")
    #: block devices this one is built on (``slaves/``), by their names
    slaves: tuple[str, ...] = ()


def _format_errors(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        msg = str(err["msg"]).removeprefix("Value error, ")
        found = err.get("input")
        shown = "" if isinstance(found, dict) or "found" in msg else f" (found {found!r})"
        parts.append(f"{loc}: {msg}{shown}" if loc else f"{msg}{shown}")
    return "; ".join(parts)


def parse_spec(spec: Mapping[str, Any] | TopologySpec, *, origin: str = "spec") -> TopologySpec:
    """Validate a spec mapping; errors become `SpecError` naming the field and value."""
    if isinstance(spec, TopologySpec):
        return spec
    if not isinstance(spec, Mapping):
        raise SpecError(
            f"topology {origin}: expected a mapping of fields, found {type(spec).__name__}"
        )
    try:
        return TopologySpec.model_validate(dict(spec))
    except ValidationError as exc:
        raise SpecError(f"topology {origin}: {_format_errors(exc)}") from exc
