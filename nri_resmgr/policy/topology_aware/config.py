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
=========================  ==========  ===================================================

The other keys of nri-plugins' ``TopologyAwarePolicy`` spec are accepted so that their
documents load unchanged; those whose feature does not exist here are listed in
`NOT_IMPLEMENTED` (dotted path -> what it would do), and loading a configuration that sets
one gives one warning naming it (`nri_resmgr.policy_documents`).  Implementing one means
giving its field a real type, using it, and deleting its line from the table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

from nri_resmgr.model import ConfigError
from nri_resmgr.policy.common import lowest_cpus, parse_cpu_amount
from nri_resmgr.topology.cpuset import CPUSet, IDSet, IDSetError
from nri_resmgr.topology.model import Topology

__all__ = [
    "NOT_IMPLEMENTED",
    "SPEC_MODEL",
    "ResolvedConfig",
    "TopologyAwareConfig",
    "resolve_config",
]

ALWAYS_RESERVED_NAMESPACES = ("kube-system",)


class CPUResources(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    cpu: str | int | float | None = None
    memory: str | int | float | None = None  # accepted, see NOT_IMPLEMENTED


class TopologyAwareConfig(BaseModel):
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

    # nri-plugins keys accepted without effect (NOT_IMPLEMENTED); loosely typed until used
    default_cpu_priority: str | None = Field(default=None, alias="defaultCPUPriority")
    unlimited_burstable: str | None = Field(default=None, alias="unlimitedBurstable")
    scheduling_classes: tuple[dict[str, JsonValue], ...] | None = Field(
        default=None, alias="schedulingClasses"
    )
    namespace_scheduling_classes: dict[str, str] | None = Field(
        default=None, alias="namespaceSchedulingClasses"
    )
    pod_qos_scheduling_classes: dict[str, str] | None = Field(
        default=None, alias="podQoSSchedulingClasses"
    )
    cpu_classes: tuple[dict[str, JsonValue], ...] | None = Field(default=None, alias="cpuClasses")
    shared_pool_cpu_class: str | None = Field(default=None, alias="sharedPoolCPUClass")
    reserved_pool_cpu_class: str | None = Field(default=None, alias="reservedPoolCPUClass")
    default_exclusive_cpu_class: str | None = Field(default=None, alias="defaultExclusiveCPUClass")
    controllable_interrupts: tuple[str, ...] | None = Field(
        default=None, alias="controllableInterrupts"
    )


#: the model a ``TopologyAwarePolicy`` spec's policy keys are checked against
SPEC_MODEL = TopologyAwareConfig

#: keys of their spec accepted here without effect: dotted path -> the feature it controls.
#: One line per key, so that implementing a key is deleting its line.
NOT_IMPLEMENTED: dict[str, str] = {
    "reservedResources.memory": "memory reserved for kube-system",
    "availableResources.memory": "memory available to containers",
    "defaultCPUPriority": "CPU priority preference, P/E cores",
    "unlimitedBurstable": "placement of Burstable containers without a CPU limit",
    "schedulingClasses": "scheduling classes: policy, nice, I/O priority",
    "namespaceSchedulingClasses": "scheduling classes by namespace",
    "podQoSSchedulingClasses": "scheduling classes by pod QoS class",
    "cpuClasses": "CPU classes: frequency, C-states",
    "sharedPoolCPUClass": "the CPU class of shared pools",
    "reservedPoolCPUClass": "the CPU class of the reserved pool",
    "defaultExclusiveCPUClass": "the CPU class of exclusive CPUs",
    "controllableInterrupts": "IRQ affinity control",
}


@dataclass(frozen=True, slots=True)
class ResolvedConfig:
    """`TopologyAwareConfig` applied to a machine."""

    options: TopologyAwareConfig
    available: CPUSet
    reserved: CPUSet
    reserved_milli: int
    reserved_namespaces: tuple[str, ...]


def _what(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(p) for p in loc) or "configuration"


def resolve_config(topology: Topology, config: Mapping[str, Any]) -> ResolvedConfig:
    """Validate `config` and apply it to `topology`."""
    try:
        opts = TopologyAwareConfig.model_validate(dict(config))
    except ValidationError as exc:
        details = "; ".join(
            f"{_what(e['loc'])}: {e['msg']} (found {e.get('input')!r})" for e in exc.errors()
        )
        raise ConfigError(f"policy topology-aware: invalid configuration: {details}") from exc
    online = topology.online_cpus()

    available = online
    spec = opts.available_resources.cpu
    if spec is not None:
        text = str(spec).strip()
        for prefix in ("exclude-cpuset:", "cpuset:"):
            if text.startswith(prefix):
                try:
                    cpus = IDSet.parse(text[len(prefix) :])
                except IDSetError as exc:
                    raise ConfigError(
                        f"policy topology-aware: availableResources.cpu: {exc}"
                    ) from exc
                available = online - cpus if prefix == "exclude-cpuset:" else online & cpus
                break
        else:
            raise ConfigError(
                f"policy topology-aware: availableResources.cpu is {text!r}; expected "
                "cpuset:LIST or exclude-cpuset:LIST"
            )
        if not available:
            raise ConfigError(
                f"policy topology-aware: availableResources.cpu {text!r} leaves no online CPU; "
                f"online CPUs are {online}"
            )

    raw = opts.reserved_resources.cpu
    if raw is None:
        raise ConfigError(
            "policy topology-aware: reservedResources.cpu is required; expected a quantity "
            "such as 750m or cpuset:0-1"
        )
    amount = parse_cpu_amount(raw, what="policy topology-aware: reservedResources.cpu")
    if amount.milli <= 0:
        raise ConfigError(
            f"policy topology-aware: reservedResources.cpu is {raw!r}; expected a non-zero "
            "CPU amount"
        )
    if amount.cpuset is not None:
        reserved = amount.cpuset
        if not reserved <= available:
            raise ConfigError(
                f"policy topology-aware: reservedResources.cpu {reserved} includes CPUs "
                f"{reserved - available} outside the available CPUs {available}"
            )
    else:
        reserved = lowest_cpus(topology, available, -(-amount.milli // 1000))
    if not (available - reserved):
        raise ConfigError(
            f"policy topology-aware: reservedResources.cpu takes every available CPU "
            f"({available}); expected some left for containers"
        )
    return ResolvedConfig(
        options=opts,
        available=available,
        reserved=reserved,
        reserved_milli=amount.milli,
        reserved_namespaces=ALWAYS_RESERVED_NAMESPACES + tuple(opts.reserved_pool_namespaces),
    )
