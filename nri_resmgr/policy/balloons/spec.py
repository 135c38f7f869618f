"""The ``BalloonsPolicy`` spec as nri-plugins writes it: the pydantic model, unchanged.

Theory of operation: `BalloonsConfig` is the model of the spec (camelCase keys, as in
the CRD ``config.nri_balloonspolicies.yaml``), `BalloonType` one entry of its
``balloonTypes``, with the enums of the values that have a fixed set
(`TopologyLevel`, `ComponentCreation`, `CPUPriority`).  Models are frozen and forbid
unknown keys; an ``Expression`` checks its operator's values as it is built.  The keys
accepted without effect are `NOT_IMPLEMENTED`.  Validating a mapping against the model
and applying it to a machine is `config.resolve_config`'s.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from nri_resmgr.policy.cpu_classes import CPUClass, TurboDomain
from nri_resmgr.policy.expressions import Operator, check_key, check_values
from nri_resmgr.policy.sched_classes import SchedulingClassSpec

__all__ = [
    "DEFAULT",
    "KIND",
    "NOT_IMPLEMENTED",
    "POD_RESOURCE_PREFIX",
    "RESERVED",
    "SPEC_MODEL",
    "SUBJECT",
    "BalloonType",
    "BalloonsConfig",
    "CPUPriority",
    "Component",
    "ComponentCreation",
    "Constraints",
    "ContainerMatch",
    "Expression",
    "LoadClass",
    "TopologyLevel",
]

RESERVED = "reserved"
DEFAULT = "default"
SUBJECT = "policy balloons"
KIND = "BalloonsPolicy"
#: nri-plugins' device names resolved through the kubelet's PodResources API (not here)
POD_RESOURCE_PREFIX = "podresourceapi:"


class TopologyLevel(enum.StrEnum):
    """``shareIdleCPUsInSame`` and load class levels."""

    SYSTEM = "system"
    PACKAGE = "package"
    DIE = "die"
    NUMA = "numa"
    L2CACHE = "l2cache"
    CORE = "core"


class ComponentCreation(enum.StrEnum):
    """``componentCreation``: which components a new composite balloon gets."""

    #: one component balloon of every component type (the default)
    ALL = "all"
    #: one component balloon only, of the component type with the fewest instances
    BALANCE_BALLOONS = "balance-balloons"


class CPUPriority(enum.StrEnum):
    HIGH = "high"
    NORMAL = "normal"
    LOW = "low"
    NONE = "none"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Expression(_Model):
    """One of ``matchExpressions`` (`nri_resmgr.policy.expressions` says what it means)."""

    key: str = ""
    operator: Operator
    values: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _valid(self) -> Expression:
        where = f"{self.operator} expression"
        check_values(self.operator, self.values, where=where)
        if self.operator is not Operator.ALWAYS_TRUE:
            check_key(self.key, where=where)
        return self


class Constraints(_Model):
    cpu: str | int | float | None = None


class Component(_Model):
    balloon_type: str = Field(alias="balloonType")


class LoadClass(_Model):
    name: str
    level: TopologyLevel
    overloads_level_in_balloon: bool = Field(default=False, alias="overloadsLevelInBalloon")


class ContainerMatch(_Model):
    match_expressions: tuple[Expression, ...] = Field(default=(), alias="matchExpressions")


class BalloonType(_Model):
    """One entry of ``balloonTypes``."""

    name: str
    components: tuple[Component, ...] = ()
    component_creation: str | None = Field(default=None, alias="componentCreation")
    namespaces: tuple[str, ...] = ()
    group_by: str = Field(default="", alias="groupBy")
    match_expressions: tuple[Expression, ...] = Field(default=(), alias="matchExpressions")
    max_cpus: int = Field(default=0, ge=0, alias="maxCPUs")
    min_cpus: int = Field(default=0, ge=0, alias="minCPUs")
    memory_types: tuple[str, ...] = Field(default=(), alias="memoryTypes")
    pin_memory: bool | None = Field(default=None, alias="pinMemory")
    allocator_priority: CPUPriority = Field(default=CPUPriority.NONE, alias="allocatorPriority")
    prefer_spread_on_physical_cores: bool | None = Field(
        default=None, alias="preferSpreadOnPhysicalCores"
    )
    hide_hyperthreads: bool | None = Field(default=None, alias="hideHyperthreads")
    allocator_topology_balancing: bool | None = Field(
        default=None, alias="allocatorTopologyBalancing"
    )
    cpu_class: str = Field(default="", alias="cpuClass")
    loads: tuple[str, ...] = ()
    min_balloons: int = Field(default=0, ge=0, alias="minBalloons")
    max_balloons: int = Field(default=0, ge=0, alias="maxBalloons")
    prefer_spreading_pods: bool = Field(default=False, alias="preferSpreadingPods")
    prefer_per_namespace_balloon: bool = Field(default=False, alias="preferPerNamespaceBalloon")
    prefer_new_balloons: bool = Field(default=False, alias="preferNewBalloons")
    share_idle_cpus_in_same: TopologyLevel | None = Field(default=None, alias="shareIdleCPUsInSame")
    prefer_close_to_devices: tuple[str, ...] = Field(default=(), alias="preferCloseToDevices")
    prefer_far_from_devices: tuple[str, ...] = Field(default=(), alias="preferFarFromDevices")
    prefer_isol_cpus: bool = Field(default=False, alias="preferIsolCpus")
    prefer_core_type: str = Field(default="", alias="preferCoreType")
    scheduling_class: str = Field(default="", alias="schedulingClass")
    show_containers_in_nrt: bool | None = Field(default=None, alias="showContainersInNrt")
    irq_claim: tuple[str, ...] = Field(default=(), alias="irqClaim")
    irq_mode: str = Field(default="", alias="irqMode")


class BalloonsConfig(_Model):
    """The ``BalloonsPolicy`` spec (nri-plugins' key names)."""

    pin_cpu: bool = Field(default=True, alias="pinCPU")
    pin_memory: bool = Field(default=True, alias="pinMemory")
    idle_cpu_class: str = Field(default="", alias="idleCPUClass")
    reserved_pool_namespaces: tuple[str, ...] = Field(default=(), alias="reservedPoolNamespaces")
    allocator_topology_balancing: bool = Field(default=False, alias="allocatorTopologyBalancing")
    prefer_spread_on_physical_cores: bool = Field(
        default=False, alias="preferSpreadOnPhysicalCores"
    )
    balloon_types: tuple[BalloonType, ...] = Field(default=(), alias="balloonTypes")
    available_resources: Constraints = Field(
        default_factory=Constraints, alias="availableResources"
    )
    reserved_resources: Constraints = Field(
        default_factory=lambda: Constraints(cpu="750m"), alias="reservedResources"
    )
    preserve: ContainerMatch | None = None
    show_containers_in_nrt: bool = Field(default=False, alias="showContainersInNrt")
    load_classes: tuple[LoadClass, ...] = Field(default=(), alias="loadClasses")
    scheduling_classes: tuple[SchedulingClassSpec, ...] = Field(
        default=(), alias="schedulingClasses"
    )
    cpu_classes: tuple[CPUClass, ...] = Field(default=(), alias="cpuClasses")
    turbo_domain: TurboDomain = Field(default=TurboDomain.PACKAGE, alias="turboDomain")
    controllable_interrupts: tuple[str, ...] = Field(default=(), alias="controllableInterrupts")
    # the common part of every nri-plugins policy spec (the daemon's, not the policy's)
    agent: Mapping[str, Any] | None = None
    control: Mapping[str, Any] | None = None
    instrumentation: Mapping[str, Any] | None = None
    log: Mapping[str, Any] | None = None


#: keys accepted as nri-plugins spells them but with no effect here (one warning each);
#: ``balloonTypes.KEY`` for keys of a balloon type
NOT_IMPLEMENTED: dict[str, str] = {
    "cpuClasses.pctPriority": "Intel SST priority core turbo is not implemented",
    "cpuClasses.sstClosID": "Intel SST priority core turbo is not implemented",
    "cpuClasses.pctMinFreq": "Intel SST priority core turbo is not implemented",
    "cpuClasses.pctMaxFreq": "Intel SST priority core turbo is not implemented",
    "cpuClasses.publishExtendedResource": "Intel SST priority core turbo is not implemented",
    "agent": "the agent section is the daemon's",
    "control": "the control section is the daemon's",
    "instrumentation": "the instrumentation section is the daemon's",
    "log": "the log section is the daemon's",
}

#: the model of the spec's policy keys (the package's `RECORD` carries it)
SPEC_MODEL = BalloonsConfig
