"""Configuration of the topology-aware policy (nri-plugins key names).

Theory of operation: the pydantic model `TopologyAwareConfig` validates the mapping the
policy is constructed with; `resolve_config` then turns it, together with the machine's
`Topology`, into a `ResolvedConfig` of plain values the rest of the package uses: the
CPUs the policy may hand out (``availableResources``), the reserved CPUs and their
capacity in millicores (``reservedResources``), and the boolean defaults.  Every error is
a `ConfigError` naming the key, what was expected and what was found.

Keys (all optional):

=========================  ==========  ===================================================
key                        default     meaning
=========================  ==========  ===================================================
reservedResources.cpu      ``750m``    quantity (``750m``, ``2``) or ``cpuset:0-1``; a
                                       quantity reserves ``ceil(q)`` CPUs from the lowest
                                       cores of the available set; must be non-zero
availableResources.cpu     all online  ``cpuset:LIST`` (only these) or
                                       ``exclude-cpuset:LIST`` (all but these)
reservedPoolNamespaces     ``[]``      namespace globs that run on reserved CPUs
                                       (``kube-system`` always does)
preferSharedCPUs           false       default of ``prefer-shared-cpus``
preferIsolatedCPUs         true        default of ``prefer-isolated-cpus``
colocatePods               false       prefer the pool of the pod's other containers
colocateNamespaces         false       prefer pools holding the same namespace
pinCPU                     true        render ``cpuset.cpus``
pinMemory                  true        render ``cpuset.mems``
fallbackToShared           false       exclusive (not mixed) request that fits nowhere
                                       -> shared
schedulingClasses          ``[]``      named scheduling / I/O priority classes
namespaceSchedulingClasses ``{}``      namespace -> default class
podQoSSchedulingClasses    ``{}``      QoS class -> default class (`sched_classes`)
defaultCPUPriority         ``none``    ``high``, ``normal``, ``low`` or ``none``: the CPU
                                       priority of containers not annotated with
                                       ``prefer-cpu-priority`` (`priority`)
unlimitedBurstable         ``package`` topology level Burstable containers without a
                                       CPU limit prefer: system, package, die, numa,
                                       l3cache
cpuClasses                 ``[]``      CPU classes (`nri_resmgr.policy.cpu_classes`)
reservedPoolCPUClass       ``""``      the class of the reserved CPUs
sharedPoolCPUClass         ``""``      the class of the shared CPUs
defaultExclusiveCPUClass   ``""``      the class of exclusive CPUs (a Guaranteed
                                       container's ``cpu-class`` annotation overrides)
=========================  ==========  ===================================================

The other keys of nri-plugins' ``TopologyAwarePolicy`` spec are accepted so that their
documents load unchanged; those whose feature does not exist here are the fields of
`NriPluginsKeys` (and `NOT_IMPLEMENTED_NESTED`), gathered in `NOT_IMPLEMENTED` (key path ->
what it would do), and loading a configuration that sets one gives one warning naming it
(`nri_resmgr.policy_documents`).  Implementing one means defining its field, with its real
type, in `TopologyAwareConfig`: it is then no longer in the table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from nri_resmgr.policy.common import parse_cpu_amount
from nri_resmgr.policy.cpu_allocator import CPUAllocator
from nri_resmgr.policy.cpu_classes import CPUClass, check_classes
from nri_resmgr.policy.irq_affinity import irq_pattern_problem
from nri_resmgr.policy.kit.constraints import (
    RESERVED_CPU,
    available_cpus,
    check_cpu_class_names,
    required_cpu,
    reserved_namespaces,
)
from nri_resmgr.policy.sched_classes import SchedulingClassSpec
from nri_resmgr.policy.topology_aware.priority import CPUPriority, priority_cpus
from nri_resmgr.topology.cpuset import CPUSet
from nri_resmgr.topology.model import Topology
from nri_resmgr.validation import invalid, validate

__all__ = [
    "NOT_IMPLEMENTED",
    "SPEC_MODEL",
    "SUBJECT",
    "NriPluginsKeys",
    "ResolvedConfig",
    "TopologyAwareConfig",
    "not_implemented_keys",
    "resolve_config",
]

SUBJECT = "policy topology-aware"


class CPUResources(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    cpu: str | int | float | None = None
    memory: str | int | float | None = None  # accepted, see NOT_IMPLEMENTED


class NriPluginsKeys(BaseModel):
    """nri-plugins' spec keys accepted here without effect, one field each.

    A field's description is the feature the key controls (the warning says it).  To
    implement a key, define its field in `TopologyAwareConfig` with its real type: the
    field there replaces this one (the placeholders are typed `Any` so that any type may
    replace them), and the key drops out of `NOT_IMPLEMENTED` by itself.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    default_cpu_priority: Any = Field(
        default=None, alias="defaultCPUPriority", description="CPU priority preference"
    )
    unlimited_burstable: Any = Field(
        default=None,
        alias="unlimitedBurstable",
        description="placement of Burstable containers without a CPU limit",
    )
    scheduling_classes: Any = Field(
        default=None,
        alias="schedulingClasses",
        description="scheduling classes: policy, nice, I/O priority",
    )
    namespace_scheduling_classes: Any = Field(
        default=None,
        alias="namespaceSchedulingClasses",
        description="scheduling classes by namespace",
    )
    pod_qos_scheduling_classes: Any = Field(
        default=None,
        alias="podQoSSchedulingClasses",
        description="scheduling classes by pod QoS class",
    )
    cpu_classes: Any = Field(
        default=None, alias="cpuClasses", description="CPU classes: frequency, C-states"
    )
    shared_pool_cpu_class: Any = Field(
        default=None, alias="sharedPoolCPUClass", description="the CPU class of shared pools"
    )
    reserved_pool_cpu_class: Any = Field(
        default=None,
        alias="reservedPoolCPUClass",
        description="the CPU class of the reserved pool",
    )
    default_exclusive_cpu_class: Any = Field(
        default=None,
        alias="defaultExclusiveCPUClass",
        description="the CPU class of exclusive CPUs",
    )
    controllable_interrupts: Any = Field(
        default=None, alias="controllableInterrupts", description="IRQ affinity control"
    )


class TopologyAwareConfig(NriPluginsKeys):
    """The policy's configuration as nri-plugins spells it (camelCase keys)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    reserved_resources: CPUResources = Field(
        default_factory=lambda: CPUResources(cpu="750m"), alias="reservedResources"
    )
    available_resources: CPUResources = Field(
        default_factory=CPUResources, alias="availableResources"
    )
    reserved_pool_namespaces: tuple[str, ...] = Field(default=(), alias="reservedPoolNamespaces")
    prefer_shared_cpus: bool = Field(default=False, alias="preferSharedCPUs")
    prefer_isolated_cpus: bool = Field(default=True, alias="preferIsolatedCPUs")
    colocate_pods: bool = Field(default=False, alias="colocatePods")
    colocate_namespaces: bool = Field(default=False, alias="colocateNamespaces")
    pin_cpu: bool = Field(default=True, alias="pinCPU")
    pin_memory: bool = Field(default=True, alias="pinMemory")
    fallback_to_shared: bool = Field(default=False, alias="fallbackToShared")
    scheduling_classes: tuple[SchedulingClassSpec, ...] = Field(
        default=(), alias="schedulingClasses"
    )
    namespace_scheduling_classes: dict[str, str] = Field(
        default_factory=dict, alias="namespaceSchedulingClasses"
    )
    pod_qos_scheduling_classes: dict[str, str] = Field(
        default_factory=dict, alias="podQoSSchedulingClasses"
    )
    default_cpu_priority: CPUPriority = Field(default=CPUPriority.NONE, alias="defaultCPUPriority")
    unlimited_burstable: Literal["system", "package", "die", "numa", "l3cache"] = Field(
        default="package", alias="unlimitedBurstable"
    )
    cpu_classes: tuple[CPUClass, ...] = Field(default=(), alias="cpuClasses")
    shared_pool_cpu_class: str = Field(default="", alias="sharedPoolCPUClass")
    reserved_pool_cpu_class: str = Field(default="", alias="reservedPoolCPUClass")
    default_exclusive_cpu_class: str = Field(default="", alias="defaultExclusiveCPUClass")
    #: interrupts the ``irq-affinity`` annotations may steer (none: all)
    controllable_interrupts: tuple[str, ...] = Field(default=(), alias="controllableInterrupts")


#: the model a ``TopologyAwarePolicy`` spec's policy keys are checked against
SPEC_MODEL = TopologyAwareConfig

#: nested keys accepted without effect: dotted path -> the feature it controls
NOT_IMPLEMENTED_NESTED: dict[str, str] = {
    "reservedResources.memory": "memory reserved for kube-system",
    "availableResources.memory": "memory available to containers",
    **{
        f"cpuClasses.{key}": "Intel SST priority core turbo"
        for key in ("pctPriority", "sstClosID", "pctMinFreq", "pctMaxFreq")
    },
    "cpuClasses.publishExtendedResource": "Intel SST priority core turbo",
}


def not_implemented_keys(model: type[NriPluginsKeys]) -> dict[str, str]:
    """The `NriPluginsKeys` fields `model` (a subclass) has not replaced, and the nested.

    A field is replaced when `model` gives it a type (a placeholder's type is `Any`).
    """
    replaced = {n for n, info in model.model_fields.items() if info.annotation is not Any}
    table = {
        info.alias or name: info.description or name
        for name, info in NriPluginsKeys.model_fields.items()
        if name not in replaced
    }
    return table | NOT_IMPLEMENTED_NESTED


#: keys of their spec accepted here without effect: key path -> the feature it controls
NOT_IMPLEMENTED: dict[str, str] = not_implemented_keys(TopologyAwareConfig)


@dataclass(frozen=True, slots=True)
class ResolvedConfig:
    """`TopologyAwareConfig` applied to a machine."""

    options: TopologyAwareConfig
    available: CPUSet
    reserved: CPUSet
    reserved_milli: int
    reserved_namespaces: tuple[str, ...]

    @property
    def names_cpu_classes(self) -> bool:
        """Whether CPU classes are configured: ``cpuClasses`` or a pool's class."""
        o = self.options
        return bool(
            o.cpu_classes
            or o.reserved_pool_cpu_class
            or o.shared_pool_cpu_class
            or o.default_exclusive_cpu_class
        )


def _reserve_by_count(topology: Topology, available: CPUSet, count: int) -> CPUSet:
    """`count` reserved CPUs as nri-plugins picks them: their CPU allocator, preferring
    normal-priority CPUs, out of the available CPUs that are not isolated (or out of all
    available ones when too few are not).

    So whole idle packages that fit go first (on a sparse machine a lone CPU's package is
    reserved and the packages with room stay whole, s8c4k/test01-sparse-4kcpus), then
    whole cores, then a thread of a core another CPU of which is unavailable (an
    isolated sibling), else the lowest.
    """
    classes = priority_cpus(topology)
    allocator = CPUAllocator(
        topology,
        high=classes.high,
        normal=classes.normal,
        low=classes.low,
        hybrid=classes.hybrid,
    )
    candidates = available - topology.isolated_cpus()
    if len(candidates) < count:
        candidates = available
    picked = allocator.allocate(candidates, count, priority=CPUPriority.NORMAL)
    return picked if picked is not None else available


def _check_cpu_classes(opts: TopologyAwareConfig) -> None:
    """Class names given once; the pools' classes among them when any is defined."""
    defined = check_classes(opts.cpu_classes, subject=SUBJECT)
    if not defined:
        return
    check_cpu_class_names(
        defined,
        [
            ("reservedPoolCPUClass", opts.reserved_pool_cpu_class),
            ("sharedPoolCPUClass", opts.shared_pool_cpu_class),
            ("defaultExclusiveCPUClass", opts.default_exclusive_cpu_class),
        ],
        subject=SUBJECT,
    )


def resolve_config(topology: Topology, config: Mapping[str, Any]) -> ResolvedConfig:
    """Validate `config` and apply it to `topology`."""
    opts = validate(TopologyAwareConfig, config, subject=SUBJECT)
    _check_cpu_classes(opts)
    for pattern in opts.controllable_interrupts:
        problem = irq_pattern_problem(pattern)
        if problem is not None:
            raise invalid(
                SUBJECT,
                "controllableInterrupts",
                f"pattern {pattern!r} {problem}; expected an interrupt number or a shell "
                "pattern (*, ?, [...]) over its /proc/interrupts description",
            )
    available = available_cpus(
        topology.online_cpus(), opts.available_resources.cpu, subject=SUBJECT
    )
    raw = required_cpu(opts.reserved_resources.cpu, subject=SUBJECT)
    amount = parse_cpu_amount(raw, subject=SUBJECT, path=RESERVED_CPU)
    if amount.milli <= 0:
        raise invalid(SUBJECT, RESERVED_CPU, f"expected a non-zero CPU amount, found {raw!r}")
    if amount.cpuset is not None:
        reserved = amount.cpuset
        if not reserved <= available:
            raise invalid(
                SUBJECT,
                RESERVED_CPU,
                f"{reserved} includes CPUs {reserved - available} outside the available "
                f"CPUs {available}",
            )
    else:
        reserved = _reserve_by_count(topology, available, -(-amount.milli // 1000))
    if not (available - reserved):
        raise invalid(
            SUBJECT,
            RESERVED_CPU,
            f"takes every available CPU ({available}); expected some left for containers",
        )
    return ResolvedConfig(
        options=opts,
        available=available,
        reserved=reserved,
        reserved_milli=amount.milli,
        reserved_namespaces=reserved_namespaces(opts.reserved_pool_namespaces),
    )
