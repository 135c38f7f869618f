"""A scenario document: its models, quantities and bounds (see the package docstring)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from nri_resmgr.documents import DocumentError, load_document
from nri_resmgr.model import ConfigError, QoSClass
from nri_resmgr.topology.cpuset import MAX_ID
from nri_resmgr.validation import format_validation_error, short_repr

_CPU_RE = re.compile(r"^\s*(\d{1,20}(?:\.\d{1,20})?)\s*(m?)\s*$")
_MEM_RE = re.compile(r"^\s*(\d{1,20}(?:\.\d{1,20})?)\s*([KMGTPE]i?|k)?\s*$")
_MEM_UNITS = {
    None: 1,
    "k": 10**3,
    "K": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 1 << 10,
    "Mi": 1 << 20,
    "Gi": 1 << 30,
    "Ti": 1 << 40,
    "Pi": 1 << 50,
    "Ei": 1 << 60,
}
QUOTA_PERIOD = 100_000
MIN_QUOTA = 1000

# Bounds on a scenario (docs/simulator.md).  They keep any scenario, mistaken or hostile,
# to seconds and tens of megabytes: every step reports every live container, so the
# output grows as steps times containers.
#: steps in one scenario
MAX_STEPS = 1000
#: containers (init containers included) created over the whole scenario
MAX_CONTAINERS = 256
#: restart steps (each synchronizes every live container anew)
MAX_RESTARTS = 100
#: container rows over all steps' reports (each step reports every live container)
MAX_ROWS = 10_000
#: a CPU quantity, in millicores: the most CPUs a machine model can have
MAX_CPU_MILLI = (MAX_ID + 1) * 1000
#: a memory quantity, in bytes (NRI carries it as int64)
MAX_MEMORY = (1 << 63) - 1


class ScenarioError(ConfigError):
    """A scenario that cannot be run (bad document, unknown pod, bad quantity)."""


def parse_cpu(value: str | int | float, *, what: str) -> int:
    """A Kubernetes CPU quantity (``500m``, ``1``, ``1.5``) in millicores."""
    m = _CPU_RE.match(str(value))
    if m is None:
        shown = short_repr(value)
        raise ScenarioError(f"{what}: expected a CPU quantity like 500m, 1 or 1.5, found {shown}")
    number = float(m.group(1))
    milli = int(number) if m.group(2) else round(number * 1000)
    if milli > MAX_CPU_MILLI:
        raise ScenarioError(
            f"{what}: expected at most {MAX_CPU_MILLI // 1000} CPUs, found {short_repr(value)}"
        )
    return milli


def parse_memory(value: str | int, *, what: str) -> int:
    """A Kubernetes memory quantity (``100M``, ``1Gi``, ``1024``) in bytes."""
    m = _MEM_RE.match(str(value))
    if m is None:
        raise ScenarioError(
            f"{what}: expected a memory quantity like 100M, 1Gi or 1048576, found "
            f"{short_repr(value)}"
        )
    amount = int(float(m.group(1)) * _MEM_UNITS[m.group(2)])
    if amount > MAX_MEMORY:
        raise ScenarioError(
            f"{what}: expected at most {MAX_MEMORY} bytes (2**63-1), found {short_repr(value)}"
        )
    return amount


# ---- the scenario document --------------------------------------------------------------


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Resources(_Doc):
    cpu: str | int | float | None = None
    memory: str | int | None = None


class ContainerSpec(_Doc):
    name: str
    requests: Resources = Field(default_factory=Resources)
    limits: Resources = Field(default_factory=Resources)


class PodSpec(_Doc):
    pod: str
    namespace: str = "default"
    annotations: dict[str, str] = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict)
    init_containers: tuple[ContainerSpec, ...] = ()
    containers: tuple[ContainerSpec, ...] = ()


class RunningContainer(ContainerSpec):
    """A container already running with this placement (a `synchronize` step)."""

    cpus: str = ""
    mems: str = ""


class RunningPod(PodSpec):
    """A pod already running (a `synchronize` step); `qos` overrides the class its
    containers' resources imply (the node's own record of it, in a dump)."""

    qos: QoSClass | None = None
    containers: tuple[RunningContainer, ...] = ()


class SynchronizeSpec(_Doc):
    """Pods the runtime reports as running, with their containers' placements: the
    plugin (re)starts and synchronizes them all (`nri-resmgr dump` writes one)."""

    pods: tuple[RunningPod, ...] = ()


class DeleteSpec(_Doc):
    pod: str


class UpdateSpec(_Doc):
    pod: str
    container: str
    requests: Resources = Field(default_factory=Resources)
    limits: Resources = Field(default_factory=Resources)


class RestartSpec(_Doc):
    pass


_OPS = ("create", "delete", "update", "restart", "synchronize")


class Step(_Doc):
    create: PodSpec | None = None
    delete: DeleteSpec | None = None
    update: UpdateSpec | None = None
    restart: RestartSpec | None = None
    synchronize: SynchronizeSpec | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Step:
        ops = [k for k in _OPS if getattr(self, k) is not None]
        if len(ops) != 1:
            raise ValueError(f"expected exactly one of {', '.join(_OPS)}; found {ops or 'none'}")
        return self

    @property
    def op(self) -> str:
        for k in _OPS:
            if getattr(self, k) is not None:
                return k
        raise AssertionError("unreachable")


class Scenario(_Doc):
    description: str = ""
    topology: str | dict[str, Any] | None = None
    policy: str | None = None
    #: the policy's configuration (the daemon config's ``policyConfig``)
    config: dict[str, Any] = Field(default_factory=dict)
    #: the daemon config's ``control`` section (RDT, block I/O, CPU classes)
    control: dict[str, Any] = Field(default_factory=dict)
    cgroup_driver: Literal["systemd", "cgroupfs"] = Field(default="systemd", alias="cgroupDriver")
    steps: tuple[Step, ...] = ()
    #: directory relative topology paths are resolved against
    base_dir: str = ""

    @field_validator("steps", mode="before")
    @classmethod
    def _few_steps(cls, value: Any) -> Any:
        if isinstance(value, list | tuple) and len(value) > MAX_STEPS:
            raise ValueError(f"expected at most {MAX_STEPS} steps, found {len(value)}")
        return value

    @model_validator(mode="after")
    def _few_containers(self) -> Scenario:
        count = sum(
            len(s.create.init_containers) + len(s.create.containers)
            for s in self.steps
            if s.create is not None
        ) + sum(
            len(p.containers)
            for s in self.steps
            if s.synchronize is not None
            for p in s.synchronize.pods
        )
        if count > MAX_CONTAINERS:
            raise ValueError(
                f"steps: expected at most {MAX_CONTAINERS} containers created over the "
                f"scenario, found {count}"
            )
        live: dict[str, int] = {}
        rows = 0
        for s in self.steps:
            if s.create is not None:
                live[s.create.pod] = len(s.create.containers)
            elif s.synchronize is not None:
                live.update((p.pod, len(p.containers)) for p in s.synchronize.pods)
            elif s.delete is not None:
                live.pop(s.delete.pod, None)
            rows += sum(live.values())
        if rows > MAX_ROWS:
            raise ValueError(
                f"steps: expected at most {MAX_ROWS} container rows over all steps' reports "
                f"(each step reports every live container), found {rows}"
            )
        restarts = sum(1 for s in self.steps if s.restart is not None)
        if restarts > MAX_RESTARTS:
            raise ValueError(
                f"steps: expected at most {MAX_RESTARTS} restart steps, found {restarts}"
            )
        return self


def load_scenario(source: Path | str | Mapping[str, Any]) -> Scenario:
    """A `Scenario` from a YAML/JSON file or an already parsed mapping."""
    name = "<scenario>"
    base = ""
    if isinstance(source, Mapping):
        data: Any = dict(source)
    else:
        path = Path(source)
        name, base = str(path), str(path.parent)
        try:
            data = load_document(path)
        except DocumentError as exc:
            raise ScenarioError(str(exc)) from exc
    if not isinstance(data, Mapping):
        raise ScenarioError(f"{name}: expected a mapping, found {type(data).__name__}")
    data = dict(data)
    data.setdefault("base_dir", base)
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(f"{name}: {format_validation_error(exc, model=Scenario)}") from exc
