"""Configuration of the balloons policy: nri-plugins' ``BalloonsPolicy`` spec, unchanged.

Theory of operation: `BalloonsConfig` is the pydantic model of the spec (`spec`, where
its names are imported from); `resolve_config` validates a
mapping against it (the bare spec, or a whole ``BalloonsPolicy`` custom resource whose
``spec`` it takes) and applies it to the machine:

- the usable CPUs (``availableResources.cpu``) and the reserved millicores
  (``reservedResources.cpu``, a quantity or ``cpuset:``/``exclude-cpuset:``), with the
  reserved CPUs when it names them (a quantity's are the CPU tree allocator's pick);
- the list of balloon types in matching order, with the built-in ``reserved`` type
  first and ``default`` last unless the configuration places them itself;
- the scheduling classes (``schedulingClasses``, checked by `sched_classes`), every
  type's ``schedulingClass`` naming one of them;
- the CPUs of every device a type names in ``preferCloseToDevices`` or
  ``preferFarFromDevices`` (`ResolvedConfig.devices`), looked up in the topology
  (`nri_resmgr.topology.locality`: discovery read them), and the ``loadClasses`` by name,
  every type's ``loads`` naming one of them; how they steer the CPUs a balloon takes is
  `hints.tree_options`'s;
- the CPU classes (``cpuClasses``, `nri_resmgr.policy.cpu_classes`): names given once,
  and every ``cpuClass`` and ``idleCPUClass`` one of them when any is defined;
- the keys the policy accepts without effect are `spec.NOT_IMPLEMENTED` (key -> why);
  `nri_resmgr.policy_documents` warns once per such key a configuration sets, as it does
  for every policy.

A key that is not in the spec at all is an error naming it, with the closest known key
("did you mean").  Every error is a `ConfigError` naming the key, what was expected and
what was found.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nri_resmgr.model import MemoryKind
from nri_resmgr.policy.balloons.spec import (
    DEFAULT,
    KIND,
    POD_RESOURCE_PREFIX,
    RESERVED,
    SUBJECT,
    BalloonsConfig,
    BalloonType,
    ComponentCreation,
    CPUPriority,
    LoadClass,
)
from nri_resmgr.policy.common import parse_cpu_amount
from nri_resmgr.policy.cpu_classes import check_classes
from nri_resmgr.policy.irq_affinity import IrqMode, irq_pattern_problem
from nri_resmgr.policy.kit.constraints import (
    RESERVED_CPU,
    available_cpus,
    check_cpu_class_names,
    cpuset_option,
    required_cpu,
    reserved_namespaces,
)
from nri_resmgr.policy.sched_classes import (
    SchedulingClasses,
    build_scheduling_classes,
)
from nri_resmgr.topology.cpuset import CPUSet, IDSet
from nri_resmgr.topology.locality import device_cpus
from nri_resmgr.topology.model import Topology
from nri_resmgr.validation import invalid, validate

__all__ = ["ResolvedConfig", "resolve_config", "spec_of"]


@dataclass(frozen=True, slots=True)
class ResolvedConfig:
    """`BalloonsConfig` applied to a machine."""

    options: BalloonsConfig
    available: CPUSet
    #: the CPUs ``reservedResources.cpu`` names (``cpuset:``/``exclude-cpuset:``): the
    #: reserved balloon keeps to them and every other balloon avoids them; empty for a
    #: quantity, whose CPUs the CPU tree allocator picks as for any balloon
    reserved: CPUSet
    reserved_milli: int
    #: every balloon type, in matching order, the built-in ones included
    types: tuple[BalloonType, ...]
    reserved_namespaces: tuple[str, ...]
    memory_kinds: Mapping[str, tuple[MemoryKind, ...]]
    #: ``schedulingClasses``; a type's ``schedulingClass`` is one of them
    scheduling: SchedulingClasses
    #: device path (``preferCloseToDevices``/``preferFarFromDevices``) -> its CPUs
    devices: Mapping[str, CPUSet]
    #: ``loadClasses`` by name; every type's ``loads`` names one of them
    load_classes: Mapping[str, LoadClass]

    def type_named(self, name: str) -> BalloonType | None:
        for t in self.types:
            if t.name == name:
                return t
        return None


def spec_of(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The spec in `config`: the ``spec`` of a ``BalloonsPolicy`` resource, or itself."""
    if "spec" in config and ("kind" in config or "apiVersion" in config):
        kind = config.get("kind")
        if kind is not None and kind != KIND:
            raise invalid(SUBJECT, "kind", f"expected {KIND}, found {kind!r}")
        spec = config["spec"]
        if not isinstance(spec, Mapping):
            raise invalid(SUBJECT, "spec", f"expected a mapping, found {type(spec).__name__}")
        return spec
    return config


def _builtins(types: tuple[BalloonType, ...], reserved_cpus: int) -> tuple[BalloonType, ...]:
    names = [t.name for t in types]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise invalid(
            SUBJECT,
            "balloonTypes",
            f"defines {', '.join(dupes)} more than once; expected each name once",
        )
    out = list(types)
    if RESERVED not in names:
        out.insert(
            0,
            BalloonType(
                name=RESERVED,
                minBalloons=1,
                minCPUs=reserved_cpus,
                allocatorPriority=CPUPriority.LOW,
            ),
        )
    if DEFAULT not in names:
        out.append(
            BalloonType(
                name=DEFAULT, minBalloons=1, maxBalloons=1, allocatorPriority=CPUPriority.LOW
            )
        )
    fixed = []
    for t in out:
        if t.name == RESERVED:
            if t.max_balloons > 1 or t.min_balloons > 1:
                raise invalid(
                    SUBJECT,
                    "balloonTypes",
                    f"balloon type {RESERVED}: minBalloons/maxBalloons is "
                    f"{t.min_balloons}/{t.max_balloons}; expected exactly one reserved balloon",
                )
            update: dict[str, Any] = {"min_balloons": 1, "max_balloons": 1}
            if "min_cpus" not in t.model_fields_set:
                update["min_cpus"] = reserved_cpus
            t = t.model_copy(update=update)
        if t.max_cpus and t.min_cpus > t.max_cpus:
            raise invalid(
                SUBJECT,
                "balloonTypes",
                f"balloon type {t.name}: minCPUs {t.min_cpus} > maxCPUs "
                f"{t.max_cpus}; expected minCPUs <= maxCPUs",
            )
        if t.max_balloons and t.min_balloons > t.max_balloons:
            raise invalid(
                SUBJECT,
                "balloonTypes",
                f"balloon type {t.name}: minBalloons {t.min_balloons} > "
                f"maxBalloons {t.max_balloons}; expected minBalloons <= maxBalloons",
            )
        fixed.append(t)
    _check_composites(fixed)
    return tuple(fixed)


#: CPU allocation keys a composite type may not set: its components' types choose CPUs
_COMPONENT_CHOOSES = (
    "prefer_spread_on_physical_cores",
    "allocator_topology_balancing",
    "prefer_close_to_devices",
    "prefer_isol_cpus",
    "prefer_core_type",
    "cpu_class",
)


def _check_composites(types: list[BalloonType]) -> None:
    """``components`` name other types without cycles, ``componentCreation`` is one of
    `ComponentCreation` and only with components, and composite types leave choosing
    CPUs to their components (nri-plugins' rules)."""
    by_name = {t.name: t for t in types}
    allowed = ", ".join(c.value for c in ComponentCreation)
    for t in types:
        where = f"balloon type {t.name}"
        creation = t.component_creation
        if creation is not None and creation not in set(ComponentCreation):
            raise invalid(
                SUBJECT,
                "balloonTypes",
                f"{where}: componentCreation is {creation!r}; expected one of {allowed}",
            )
        if creation is not None and not t.components:
            raise invalid(
                SUBJECT,
                "balloonTypes",
                f"{where}: componentCreation is {creation!r} but there are no components; "
                "expected components with it",
            )
        for comp in t.components:
            if comp.balloon_type not in by_name or comp.balloon_type == t.name:
                raise invalid(
                    SUBJECT,
                    "balloonTypes",
                    f"{where}: component balloonType {comp.balloon_type!r} is not another "
                    f"balloon type; expected one of {', '.join(sorted(set(by_name) - {t.name}))}",
                )
        if t.components:
            aliases = BalloonType.model_fields
            chosen = [aliases[k].alias or k for k in _COMPONENT_CHOOSES if k in t.model_fields_set]
            if chosen:
                raise invalid(
                    SUBJECT,
                    "balloonTypes",
                    f"{where}: a composite type sets {', '.join(chosen)}; expected CPU "
                    "allocation options on its component types only",
                )
    for t in types:
        path = [t.name]
        todo = [(t, 0)]
        while todo:  # depth first over the component types, `path` the way down
            cur, i = todo.pop()
            if i == len(cur.components):
                path.pop()
                continue
            todo.append((cur, i + 1))
            name = cur.components[i].balloon_type
            if name in path:
                raise invalid(
                    SUBJECT,
                    "balloonTypes",
                    f"balloon type {t.name}: components form a cycle "
                    f"{' -> '.join([*path[path.index(name) :], name])}; expected no type "
                    "to contain itself",
                )
            path.append(name)
            todo.append((by_name[name], 0))


def _memory_kinds(t: BalloonType) -> tuple[MemoryKind, ...]:
    out = []
    for word in t.memory_types:
        try:
            out.append(MemoryKind(word.strip().lower()))
        except ValueError:
            raise invalid(
                SUBJECT,
                "balloonTypes",
                f"balloon type {t.name}: memoryTypes has {word!r}; expected "
                f"one of {', '.join(k.value.upper() for k in MemoryKind)}",
            ) from None
    return tuple(out)


def _device_cpus(topology: Topology, t: BalloonType, key: str, path: str) -> CPUSet | None:
    """The CPUs of device `path`; None for a ``podresourceapi:`` pattern (in
    ``preferCloseToDevices`` only: the placed container's kubelet devices, `devices`)."""
    if path.startswith(POD_RESOURCE_PREFIX):
        pattern = path[len(POD_RESOURCE_PREFIX) :]
        problem = irq_pattern_problem(pattern) if pattern else "is empty"
        if key != "preferCloseToDevices" or problem is not None:
            raise invalid(
                SUBJECT,
                "balloonTypes",
                f"balloon type {t.name}: {key} has {path!r}; expected "
                + (
                    "a sysfs path (the kubelet's devices are preferCloseToDevices only)"
                    if problem is None
                    else f"podresourceapi:RESOURCE-PATTERN (*, ?, [...]), whose pattern {problem}"
                ),
            )
        return None
    got = device_cpus(topology, path)
    if got is None:
        raise invalid(
            SUBJECT,
            "balloonTypes",
            f"balloon type {t.name}: {key} has {path!r}, which this machine "
            f"({topology.source or 'the topology'}) does not have; expected the sysfs path of "
            "a NUMA node (/sys/devices/system/node/nodeN), a CPU cache "
            "(/sys/devices/system/cpu/cpuN/cache/indexM), a PCI function "
            "(/sys/bus/pci/devices/ADDRESS) or a network device (/sys/class/net/NAME)",
        )
    return got


def _devices(topology: Topology, types: tuple[BalloonType, ...]) -> dict[str, CPUSet]:
    """The CPUs of every device a type names, first named first."""
    out: dict[str, CPUSet] = {}
    for t in types:  # a composite type has none (`_check_composites`)
        for key, paths in (
            ("preferCloseToDevices", t.prefer_close_to_devices),
            ("preferFarFromDevices", t.prefer_far_from_devices),
        ):
            for path in paths:
                cpus = _device_cpus(topology, t, key, path)
                if path not in out and cpus is not None:
                    out[path] = cpus
    return out


def _load_classes(
    types: tuple[BalloonType, ...], load_classes: tuple[LoadClass, ...]
) -> dict[str, LoadClass]:
    """``loadClasses`` by name, each name once and every type's ``loads`` among them."""
    classes: dict[str, LoadClass] = {}
    for lc in load_classes:
        if lc.name in classes:
            raise invalid(
                SUBJECT,
                "loadClasses",
                f"defines {lc.name!r} more than once; expected each name once",
            )
        classes[lc.name] = lc
    for t in types:
        unknown = [name for name in t.loads if name not in classes]
        if unknown:
            raise invalid(
                SUBJECT,
                "balloonTypes",
                f"balloon type {t.name}: loads has {', '.join(unknown)}, not in loadClasses; "
                f"expected one of {', '.join(classes) or 'no names (none defined)'}",
            )
    return classes


def _check_interrupts(opts: BalloonsConfig) -> None:
    """``controllableInterrupts``, every ``irqClaim`` pattern and ``irqMode`` are valid."""
    patterns = [("controllableInterrupts", p) for p in opts.controllable_interrupts]
    for t in opts.balloon_types:
        patterns += [(f"balloonTypes[{t.name}].irqClaim", p) for p in t.irq_claim]
        if t.irq_mode not in set(IrqMode):
            raise invalid(
                SUBJECT,
                f"balloonTypes[{t.name}].irqMode",
                f"expected one of {', '.join(m for m in IrqMode if m)} (or none), found "
                f"{t.irq_mode!r}",
            )
    for where, pattern in patterns:
        problem = irq_pattern_problem(pattern)
        if problem is not None:
            raise invalid(
                SUBJECT,
                where,
                f"pattern {pattern!r} {problem}; expected an interrupt number or a shell "
                "pattern (*, ?, [...]) over its /proc/interrupts description",
            )


def _check_cpu_classes(opts: BalloonsConfig, types: tuple[BalloonType, ...]) -> None:
    """Class names given twice, and (when ``cpuClasses`` defines any) a balloon type's
    ``cpuClass`` or ``idleCPUClass`` naming none of them, are errors.

    Without ``cpuClasses`` the names may be the daemon's ``control.cpu.classes``, which
    the policy does not see (the CPU class control warns about names defined nowhere).
    """
    defined = check_classes(opts.cpu_classes, subject=SUBJECT)
    if not defined:
        return
    uses = [(f"balloonTypes[{t.name}].cpuClass", t.cpu_class) for t in types]
    uses.append(("idleCPUClass", opts.idle_cpu_class))
    check_cpu_class_names(defined, uses, subject=SUBJECT)


def resolve_config(topology: Topology, config: Mapping[str, Any]) -> ResolvedConfig:
    """Validate `config` (a spec or a ``BalloonsPolicy`` resource) for `topology`."""
    opts = validate(BalloonsConfig, spec_of(config), subject=SUBJECT)
    _check_interrupts(opts)
    available = available_cpus(
        topology.online_cpus(), opts.available_resources.cpu, subject=SUBJECT
    )
    raw_reserved = required_cpu(opts.reserved_resources.cpu, subject=SUBJECT)
    text = str(raw_reserved).strip()
    explicit = cpuset_option(text, available, subject=SUBJECT, path=RESERVED_CPU)
    if explicit is not None:
        reserved = explicit
        milli = 1000 * len(reserved)
    else:
        amount = parse_cpu_amount(raw_reserved, subject=SUBJECT, path=RESERVED_CPU)
        reserved = IDSet()
        milli = amount.milli
    count = -(-milli // 1000)
    if count <= 0:
        raise invalid(
            SUBJECT, RESERVED_CPU, f"{text!r} gives no CPU; expected at least one available CPU"
        )
    types = _builtins(opts.balloon_types, count)
    _check_cpu_classes(opts, types)
    return ResolvedConfig(
        options=opts,
        available=available,
        reserved=reserved,
        reserved_milli=milli,
        types=types,
        reserved_namespaces=reserved_namespaces(opts.reserved_pool_namespaces),
        memory_kinds={t.name: _memory_kinds(t) for t in types},
        scheduling=build_scheduling_classes(
            opts.scheduling_classes,
            namespaces={},
            qos={},
            subject=SUBJECT,
            references={
                f"balloonTypes[{t.name}].schedulingClass": t.scheduling_class
                for t in types
                if t.scheduling_class
            },
        ),
        devices=_devices(topology, types),
        load_classes=_load_classes(types, opts.load_classes),
    )
