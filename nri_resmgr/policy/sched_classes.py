"""Scheduling classes: which Linux scheduling and I/O priority a container is created with.

Theory of operation
-------------------
A policy's configuration names classes (nri-plugins' ``schedulingClasses``: ``name``,
``policy``, ``priority``, ``flags``, ``nice``, ``runtime``, ``deadline``, ``period``,
``ioClass``, ``ioPriority``) and defaults for namespaces (``namespaceSchedulingClasses``,
namespace -> class) and for pod QoS classes (``podQoSSchedulingClasses``, QoS class ->
class; keys in any case, ``BestEffort`` or ``besteffort``).  `build_scheduling_classes`
checks them once, when the policy is constructed, and turns them into a
`SchedulingClasses` value of plain `model.SchedulingClass` values; `SchedulingClasses.
resolve` then picks a container's class, in this order:

1. the effective annotation ``scheduling-class.resource-policy.nri.io`` (``/container.NAME``
   over ``/pod`` over the bare key);
2. the policy's own default for the container, if it has one (the balloons policy: the
   ``schedulingClass`` of the container's balloon type);
3. the class of the container's namespace;
4. the class of the pod's QoS class;
5. none: the runtime's defaults.

The class travels to the runtime in the creation adjustment (NRI's ``LinuxScheduler``,
from NRI v0.11.0, and ``LinuxIOPriority``, from v0.10.0; `SchedulingClasses.
nri_requirements` names which a configuration needs, and the daemon refuses a runtime
whose NRI release lacks one: an older runtime drops unknown adjustment fields silently).

Where this differs from nri-plugins, by design: attribute combinations the kernel refuses
(``fifo`` without a priority in 1..99, a priority with ``other``, a nice value outside
-20..19, deadline parameters out of order) are configuration errors here, not container
start failures; a default naming an undefined class is a configuration error, not a
failure of each container it applies to; an annotation naming an undefined class fails the
container with an `AnnotationError` (nri-plugins logs it and creates the container without
a class).

Pure: no IO.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypeVar

from nri_resmgr.limits import shown
from nri_resmgr.model import (
    ANNOTATION_DOMAIN,
    AnnotationError,
    ContainerInfo,
    Decision,
    IOClass,
    PolicyState,
    QoSClass,
    SchedFlag,
    SchedPolicy,
    SchedulingClass,
)
from nri_resmgr.validation import invalid

__all__ = [
    "IO_PRIORITY_SINCE",
    "NO_SCHEDULING_CLASSES",
    "SCHEDULER_SINCE",
    "SCHEDULING_CLASS_ANNOTATION",
    "NRIRequirement",
    "SchedulingClassSpec",
    "SchedulingClasses",
    "build_scheduling_classes",
    "with_scheduling",
]

S = TypeVar("S", bound=PolicyState)

#: the effective annotation naming a container's scheduling class
SCHEDULING_CLASS_ANNOTATION = f"scheduling-class.{ANNOTATION_DOMAIN}"
#: the first NRI release whose container adjustment carries LinuxScheduler
SCHEDULER_SINCE = (0, 11, 0)
#: the first NRI release whose container adjustment carries LinuxIOPriority
IO_PRIORITY_SINCE = (0, 10, 0)

_REALTIME = (SchedPolicy.FIFO, SchedPolicy.RR)
_NICE_RANGE = (-20, 19)
_RT_PRIORITY_RANGE = (1, 99)
_IO_PRIORITY_RANGE = (0, 7)
#: the largest deadline runtime, deadline or period (sched_setattr(2): below 2**63 ns)
MAX_SCHED_NS = (1 << 63) - 1


class SchedulingClassSpec(BaseModel):
    """One entry of ``schedulingClasses``, as nri-plugins spells it."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    name: str
    policy: SchedPolicy | None = None
    priority: int | None = None
    flags: tuple[SchedFlag, ...] = ()
    nice: int | None = None
    #: nanoseconds; the kernel refuses 2**63 and more (and NRI's fields are 64 bits)
    runtime: int | None = Field(default=None, ge=0, le=MAX_SCHED_NS)
    deadline: int | None = Field(default=None, ge=0, le=MAX_SCHED_NS)
    period: int | None = Field(default=None, ge=0, le=MAX_SCHED_NS)
    io_class: IOClass | None = Field(default=None, alias="ioClass")
    io_priority: int | None = Field(default=None, alias="ioPriority")


@dataclass(frozen=True, slots=True)
class NRIRequirement:
    """An adjustment field a configuration needs, and the NRI release that brought it."""

    field: str
    since: tuple[int, int, int]
    #: the classes that need it
    classes: tuple[str, ...]

    def describe(self) -> str:
        since = "v" + ".".join(str(p) for p in self.since)
        return f"{self.field} (NRI {since}+; scheduling classes {', '.join(self.classes)})"


@dataclass(frozen=True, slots=True)
class SchedulingClasses:
    """The checked scheduling classes of one configuration (module docstring)."""

    by_name: Mapping[str, SchedulingClass] = field(default_factory=dict)
    by_namespace: Mapping[str, str] = field(default_factory=dict)
    by_qos: Mapping[QoSClass, str] = field(default_factory=dict)

    def resolve(
        self, container: ContainerInfo, *, default: str | None = None
    ) -> SchedulingClass | None:
        """The class `container` is created with: annotation, the policy's `default` (a
        class name given to `build_scheduling_classes` in `references`), namespace, QoS,
        or None."""
        name = container.annotation(SCHEDULING_CLASS_ANNOTATION)
        if name is not None:
            found = self.by_name.get(name.strip())
            if found is None:
                known = ", ".join(sorted(self.by_name)) or "none defined"
                raise AnnotationError(
                    f"{container.pretty}: annotation {SCHEDULING_CLASS_ANNOTATION} names "
                    f"scheduling class {shown(name)}; expected one of schedulingClasses ({known})"
                )
            return found
        if default is None:
            default = self.by_namespace.get(container.namespace)
        if default is None:
            default = self.by_qos.get(container.qos_class)
        return self.by_name[default] if default is not None else None

    def nri_requirements(self) -> tuple[NRIRequirement, ...]:
        """The adjustment fields these classes need from the runtime's NRI release."""
        out = []
        sched = tuple(n for n, c in sorted(self.by_name.items()) if c.sets_scheduler)
        if sched:
            out.append(NRIRequirement("LinuxScheduler", SCHEDULER_SINCE, sched))
        io = tuple(n for n, c in sorted(self.by_name.items()) if c.sets_io_priority)
        if io:
            out.append(NRIRequirement("LinuxIOPriority", IO_PRIORITY_SINCE, io))
        return tuple(out)


#: the classes of a policy without scheduling classes: none
NO_SCHEDULING_CLASSES = SchedulingClasses()


def _in_range(
    subject: str, path: str, value: int | None, bounds: tuple[int, int], why: str
) -> None:
    if value is not None and not bounds[0] <= value <= bounds[1]:
        raise invalid(subject, path, f"expected {bounds[0]}..{bounds[1]} ({why}), found {value}")


def _class_value(spec: SchedulingClassSpec, *, subject: str) -> SchedulingClass:
    what = f"schedulingClasses[{spec.name}]"
    pol = spec.policy
    if pol in _REALTIME:
        if spec.priority is None:
            raise invalid(
                subject, what, f"policy {pol} needs a priority; expected 1..99, found none"
            )
        _in_range(subject, f"{what}.priority", spec.priority, _RT_PRIORITY_RANGE, f"policy {pol}")
    elif spec.priority not in (None, 0):
        raise invalid(
            subject,
            f"{what}.priority",
            f"expected 0 or unset for policy {pol or 'unset'} (only fifo and rr take a "
            f"priority, 1..99; use nice), found {spec.priority}",
        )
    _in_range(subject, f"{what}.nice", spec.nice, _NICE_RANGE, "nice(2)")
    timing = {"runtime": spec.runtime, "deadline": spec.deadline, "period": spec.period}
    found = ", ".join(f"{k}={v}" for k, v in timing.items())
    if pol is SchedPolicy.DEADLINE:
        if spec.runtime is None or spec.deadline is None:
            raise invalid(
                subject, what, f"policy deadline needs runtime and deadline; found {found}"
            )
        period = spec.period if spec.period is not None else spec.deadline
        if not spec.runtime <= spec.deadline <= period:
            raise invalid(subject, what, f"expected runtime <= deadline <= period; found {found}")
    else:
        set_ = [k for k, v in timing.items() if v is not None]
        if set_:
            raise invalid(
                subject,
                what,
                f"{', '.join(set_)} only apply to policy deadline; found policy {pol or 'unset'}",
            )
    _in_range(subject, f"{what}.ioPriority", spec.io_priority, _IO_PRIORITY_RANGE, "ionice(1)")
    return SchedulingClass(
        name=spec.name,
        policy=pol,
        priority=spec.priority,
        nice=spec.nice,
        flags=tuple(dict.fromkeys(spec.flags)),
        runtime=spec.runtime,
        deadline=spec.deadline,
        period=spec.period,
        io_class=spec.io_class,
        io_priority=spec.io_priority,
    )


_QOS_BY_LOWER = {q.value.lower(): q for q in QoSClass}


def build_scheduling_classes(
    classes: tuple[SchedulingClassSpec, ...],
    *,
    namespaces: Mapping[str, str],
    qos: Mapping[str, str],
    subject: str,
    references: Mapping[str, str] | None = None,
) -> SchedulingClasses:
    """Check a configuration's classes and defaults; `references` are the
    configuration's other class names (the key says where,
    ``balloonTypes[db].schedulingClass``); a problem is `InvalidConfig` of `subject`
    (``policy topology-aware``) at its key."""
    by_name: dict[str, SchedulingClass] = {}
    for spec in classes:
        if not spec.name.strip():
            raise invalid(
                subject, "schedulingClasses", f"expected a class name, found {spec.name!r}"
            )
        if spec.name in by_name:
            raise invalid(
                subject,
                "schedulingClasses",
                f"class {spec.name!r} is defined twice; expected unique names",
            )
        by_name[spec.name] = _class_value(spec, subject=subject)

    def check(key: str, ref: str) -> None:
        if ref not in by_name:
            known = ", ".join(sorted(by_name)) or "none defined"
            raise invalid(
                subject, key, f"expected one of schedulingClasses ({known}), found {ref!r}"
            )

    for key, ref in namespaces.items():
        check(f"namespaceSchedulingClasses[{key}]", ref)
    by_qos: dict[QoSClass, str] = {}
    for key, ref in qos.items():
        q = _QOS_BY_LOWER.get(key.lower())
        if q is None:
            raise invalid(
                subject,
                "podQoSSchedulingClasses",
                f"unknown key {key!r}; expected one of " + ", ".join(c.value for c in QoSClass),
            )
        check(f"podQoSSchedulingClasses[{key}]", ref)
        by_qos[q] = ref
    for key, ref in (references or {}).items():
        check(key, ref)
    return SchedulingClasses(by_name=by_name, by_namespace=dict(namespaces), by_qos=by_qos)


def with_scheduling(decision: Decision[S], scheduling: SchedulingClass | None) -> Decision[S]:
    """`decision` with `scheduling` on its subject's assignment (None: unchanged)."""
    if scheduling is None or decision.assignment is None:
        return decision
    return replace(decision, assignment=replace(decision.assignment, scheduling=scheduling))
