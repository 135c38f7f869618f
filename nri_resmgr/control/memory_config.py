"""The memory components' configuration models: ``control.memoryPolicy``,
``control.memoryQos`` and ``control.sgxEpc``.

Theory of operation: every daemon validates its whole configuration before it registers,
so these models load with `nri_resmgr.control.config` whether or not a section is given;
what the components decide from them (`mempolicy.policy_for`, `memqos.qos_for`,
`sgxepc.epc_limit`) and the controllers that send it (`nri_resmgr.control.memory`) load
only when a section switches a component on (`nri_resmgr.control.wiring.memory_control`).
The rules each model checks are those of its component's module docstring (`mempolicy`,
`memqos`, `sgxepc`): a class's policy as the kernel and runc would check it at container
start, unique class names, cgroup v2 file names, keys matched in any case as nri-plugins'
Go decoder matches them (`fold_keys`).

Pure: no IO.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from nri_resmgr.limits import shown
from nri_resmgr.topology.cpuset import IDSet, IDSetError, NodeSet
from nri_resmgr.topology.model import LOCAL_DISTANCE

__all__ = [
    "MemoryPolicyClass",
    "MemoryPolicyConfig",
    "MemoryPolicySpec",
    "MemoryQoSClass",
    "MemoryQoSConfig",
    "MpolFlag",
    "MpolMode",
    "NodesForm",
    "NodesSpec",
    "SgxEpcConfig",
    "fold_keys",
    "parse_nodes",
    "unique_names",
]

#: the largest firmware distance (the SLIT holds bytes)
MAX_DISTANCE = 255


class MpolMode(enum.StrEnum):
    """A ``set_mempolicy(2)`` mode, spelt as the kernel header (and NRI's enum) spells it."""

    DEFAULT = "MPOL_DEFAULT"
    PREFERRED = "MPOL_PREFERRED"
    BIND = "MPOL_BIND"
    INTERLEAVE = "MPOL_INTERLEAVE"
    LOCAL = "MPOL_LOCAL"
    PREFERRED_MANY = "MPOL_PREFERRED_MANY"
    WEIGHTED_INTERLEAVE = "MPOL_WEIGHTED_INTERLEAVE"


class MpolFlag(enum.StrEnum):
    """A mode flag of ``set_mempolicy(2)``."""

    STATIC_NODES = "MPOL_F_STATIC_NODES"
    RELATIVE_NODES = "MPOL_F_RELATIVE_NODES"
    NUMA_BALANCING = "MPOL_F_NUMA_BALANCING"


#: modes the kernel (and runc's validator) take with no nodes only
NO_NODES = frozenset({MpolMode.DEFAULT, MpolMode.LOCAL})
#: modes that need at least one node (MPOL_PREFERRED takes zero or one set)
NEED_NODES = frozenset(
    {MpolMode.BIND, MpolMode.INTERLEAVE, MpolMode.PREFERRED_MANY, MpolMode.WEIGHTED_INTERLEAVE}
)
#: modes MPOL_F_NUMA_BALANCING is valid with (the kernel's sanitize_mpol_flags)
NUMA_BALANCING_MODES = frozenset({MpolMode.BIND, MpolMode.PREFERRED_MANY})


class NodesForm(enum.StrEnum):
    """How a policy's ``nodes`` is given."""

    NONE = ""
    ALL = "all"
    ALLOWED_MEMS = "allowed-mems"
    CPU_NODES = "cpu-nodes"
    CPU_PACKAGES = "cpu-packages"
    MAX_DIST = "max-dist"
    LIST = "list"


_NAMED_FORMS = "all, allowed-mems, cpu-nodes, cpu-packages, max-dist:N or a node list like 0-3,8"


@dataclass(frozen=True, slots=True)
class NodesSpec:
    """A parsed ``nodes`` value: its form, and the distance or the nodes it carries."""

    form: NodesForm
    distance: int = 0
    nodes: NodeSet = field(default_factory=IDSet)

    def __str__(self) -> str:
        if self.form is NodesForm.MAX_DIST:
            return f"max-dist:{self.distance}"
        if self.form is NodesForm.LIST:
            return str(self.nodes)
        return str(self.form)


def parse_nodes(text: str) -> NodesSpec:
    """The `NodesSpec` of a ``nodes`` value; `ValueError` saying what was expected."""
    value = text.strip()
    if not value:
        return NodesSpec(NodesForm.NONE)
    if value in {f.value for f in NodesForm} - {"", "max-dist", "list"}:
        return NodesSpec(NodesForm(value))
    if value.startswith("max-dist:"):
        raw = value.removeprefix("max-dist:").strip()
        if not raw.isdigit() or not LOCAL_DISTANCE <= int(raw) <= MAX_DISTANCE:
            raise ValueError(
                f"expected max-dist:N with N a distance {LOCAL_DISTANCE}..{MAX_DISTANCE} "
                f"({LOCAL_DISTANCE} is a node's distance to itself), found {shown(value)}"
            )
        return NodesSpec(NodesForm.MAX_DIST, distance=int(raw))
    if value[:1].isdigit():
        try:
            return NodesSpec(NodesForm.LIST, nodes=IDSet.parse(value))
        except IDSetError as exc:
            raise ValueError(f"expected a node list like 0-3,8, found {exc}") from exc
    raise ValueError(f"expected one of {_NAMED_FORMS}, found {shown(value)}")


class NamedClass(Protocol):
    """A configuration class: something with a name."""

    @property
    def name(self) -> str: ...


def fold_keys(data: Any, names: Sequence[str], *, subject: str) -> Any:
    """`data` with each key matching one of `names` in another case renamed to it.

    Their YAML goes through Go's encoding/json, which matches keys in any case
    (``SwapLimitRatio`` and ``swaplimitratio`` alike); two keys that fold to one name
    are an error.  Anything but a mapping is returned as it is, for validation to report.
    """
    if not isinstance(data, Mapping):
        return data
    by_fold = {n.lower(): n for n in names}
    out: dict[Any, Any] = {}
    for key, value in data.items():
        name = by_fold.get(str(key).lower(), key) if isinstance(key, str) else key
        if name in out:
            raise ValueError(
                f"{subject}: expected one {name!r} key (keys match in any case, as in "
                f"nri-plugins), found it twice"
            )
        out[name] = value
    return out


def unique_names(classes: Sequence[NamedClass]) -> None:
    """Raise `ValueError` unless every class in `classes` has a name of its own (the
    memory policy's and memory QoS's ``classes`` alike)."""
    seen: set[str] = set()
    for c in classes:
        if c.name in seen:
            raise ValueError(f"expected unique class names, found {c.name!r} twice")
        seen.add(c.name)


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class MemoryPolicySpec(_Model):
    """``{mode, nodes, flags}``: one memory policy as configured or annotated.

    ``mode`` None (or empty) is no policy: allowed in an annotation, refused in a class.
    """

    mode: MpolMode | None = None
    nodes: str = ""
    flags: tuple[MpolFlag, ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _fold(cls, data: Any) -> Any:
        return fold_keys(data, ("mode", "nodes", "flags"), subject="policy")

    @field_validator("mode", mode="before")
    @classmethod
    def _empty_mode(cls, value: Any) -> Any:
        return None if value == "" else value

    @field_validator("flags")
    @classmethod
    def _once_each(cls, value: tuple[MpolFlag, ...]) -> tuple[MpolFlag, ...]:
        return tuple(dict.fromkeys(value))

    @field_validator("nodes", mode="before")
    @classmethod
    def _nodes_text(cls, value: Any) -> Any:
        # `nodes: 4` is a YAML number; theirs reads it into a string field only when quoted,
        # their samples write it bare (`nodes: 4`) and sigs.k8s.io/yaml turns it to "4"
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        return "" if value is None else value

    @model_validator(mode="after")
    def _kernel_rules(self) -> MemoryPolicySpec:
        nodes = parse_nodes(self.nodes)
        mode, flags = self.mode, set(self.flags)
        if mode is None:
            return self
        if mode in NO_NODES and nodes.form is not NodesForm.NONE:
            raise ValueError(f"nodes: expected none with {mode} (it takes no nodes), found {nodes}")
        if mode in NEED_NODES and nodes.form is NodesForm.NONE:
            raise ValueError(f"nodes: expected some with {mode}, found none")
        if {MpolFlag.STATIC_NODES, MpolFlag.RELATIVE_NODES} <= flags:
            raise ValueError(
                "flags: expected at most one of MPOL_F_STATIC_NODES and MPOL_F_RELATIVE_NODES "
                "(the kernel refuses both), found both"
            )
        if MpolFlag.NUMA_BALANCING in flags and mode not in NUMA_BALANCING_MODES:
            raise ValueError(
                f"flags: expected MPOL_F_NUMA_BALANCING only with MPOL_BIND or "
                f"MPOL_PREFERRED_MANY, found it with {mode}"
            )
        if mode in NO_NODES and flags:
            raise ValueError(
                f"flags: expected none with {mode} (it has no nodes to interpret), found "
                + ", ".join(sorted(flags))
            )
        return self

    @property
    def nodes_spec(self) -> NodesSpec:
        return parse_nodes(self.nodes)

    def describe(self) -> str:
        """``MPOL_INTERLEAVE|MPOL_F_STATIC_NODES:cpu-nodes``, for logs (their String())."""
        head = "|".join([str(self.mode or "none"), *map(str, self.flags)])
        return f"{head}:{self.nodes}"


class MemoryPolicyClass(_Model):
    """``{name, policy}``: a named policy that annotations pick."""

    name: str = Field(min_length=1)
    policy: MemoryPolicySpec

    @model_validator(mode="before")
    @classmethod
    def _fold(cls, data: Any) -> Any:
        return fold_keys(data, ("name", "policy"), subject="class")

    @field_validator("policy")
    @classmethod
    def _has_mode(cls, value: MemoryPolicySpec) -> MemoryPolicySpec:
        if value.mode is None:
            raise ValueError("mode: expected one of " + ", ".join(MpolMode) + ", found none")
        return value


class MemoryPolicyConfig(_Model):
    """``control.memoryPolicy``: their plugin's configuration (module docstring)."""

    inject_mpolset: bool = Field(default=False, alias="injectMpolset")
    classes: tuple[MemoryPolicyClass, ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _fold(cls, data: Any) -> Any:
        return fold_keys(data, ("injectMpolset", "classes"), subject="memoryPolicy")

    @field_validator("classes")
    @classmethod
    def _unique(cls, value: tuple[MemoryPolicyClass, ...]) -> tuple[MemoryPolicyClass, ...]:
        unique_names(value)
        return value

    def by_name(self) -> dict[str, MemoryPolicyClass]:
        return {c.name: c for c in self.classes}


# memory QoS (`nri_resmgr.control.memqos`)

#: a cgroup v2 interface file name: controller, a dot, the rest
_UNIFIED_KEY = re.compile(r"^[a-z][a-z0-9_]*\.[a-z0-9_.]+$")


class MemoryQoSClass(_Model):
    """``{name, swaplimitratio}``: how a class's ``memory.high`` follows the limit."""

    name: str = Field(min_length=1)
    swap_limit_ratio: float = Field(default=0.0, alias="swaplimitratio", ge=0.0, le=1.0)

    @model_validator(mode="before")
    @classmethod
    def _fold(cls, data: Any) -> Any:
        return fold_keys(data, ("name", "swaplimitratio"), subject="class")


class MemoryQoSConfig(_Model):
    """``control.memoryQos``: their plugin's configuration (module docstring)."""

    classes: tuple[MemoryQoSClass, ...] = ()
    unified_annotations: tuple[str, ...] = Field(default=(), alias="unifiedannotations")

    @model_validator(mode="before")
    @classmethod
    def _fold(cls, data: Any) -> Any:
        return fold_keys(data, ("classes", "unifiedannotations"), subject="memoryQos")

    @field_validator("classes")
    @classmethod
    def _unique(cls, value: tuple[MemoryQoSClass, ...]) -> tuple[MemoryQoSClass, ...]:
        unique_names(value)
        return value

    @field_validator("unified_annotations")
    @classmethod
    def _file_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for key in value:
            if not _UNIFIED_KEY.match(key):
                raise ValueError(
                    f"expected cgroup v2 file names like memory.high, found {shown(key)}"
                )
        return value

    def by_name(self) -> dict[str, MemoryQoSClass]:
        return {c.name: c for c in self.classes}


# SGX EPC (`nri_resmgr.control.sgxepc`)


class SgxEpcConfig(BaseModel):
    """``control.sgxEpc``: ``enable`` reads the annotation."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enable: bool = False
