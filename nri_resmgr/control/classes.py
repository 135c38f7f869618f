"""Choosing a container's RDT and block I/O classes (pure).

Theory of operation: the runtime, not this daemon, moves a container into its RDT group
and block I/O class: the NRI adjustment carries the class *names*
(`SetLinuxRDTClass`, `SetLinuxBlockIOClass`).  This module decides those names from the
container's effective annotations and the pod's QoS class, in this order:

1. the effective annotation `rdtclass.resource-policy.nri.io` (or
   `blockioclass.resource-policy.nri.io`): `.../container.NAME` over `.../pod` over the
   bare key, exactly as `ContainerInfo.annotation` looks it up; the value must be a valid
   name (`names.validate_name`) and one of the known classes, else `AnnotationError`;
2. RDT only: a pod annotated with `node.koordinator.sh/resctrl` gets a resctrl group of its
   own (created by `RdtController.ensure_pod_group` at RunPodSandbox), named
   `pod_group_name(pod.uid)`, and its containers use that name as their RDT class;
3. with `usePodQoSAsDefaultClass`, the pod's QoS class name (`Guaranteed`, `Burstable`,
   `BestEffort`) when a class of that name is known (otherwise the next step applies:
   a node need not define a class for every QoS class);
4. `defaultClass`, when set (it must be known, else `ConfigError`);
5. no class (`None`): the adjustment leaves the runtime's default in place.

A disabled controller (`enable: false`) always answers `None` and ignores annotations.
Nothing here touches files; `select_classes` is safe to call from a policy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from nri_resmgr.control.names import validate_name
from nri_resmgr.model import (
    ANNOTATION_DOMAIN,
    AnnotationError,
    Assignment,
    ConfigError,
    ContainerInfo,
    Pod,
)

RDT_CLASS_ANNOTATION = f"rdtclass.{ANNOTATION_DOMAIN}"
BLOCKIO_CLASS_ANNOTATION = f"blockioclass.{ANNOTATION_DOMAIN}"
#: Koordinator's per-pod resctrl annotation (JSON), see `resctrl.parse_pod_resctrl`.
RESCTRL_POD_ANNOTATION = "node.koordinator.sh/resctrl"
#: Prefix of the resctrl groups this daemon creates for annotated pods; marks ownership.
POD_GROUP_PREFIX = "nri-resmgr-pod-"


class _Model(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="forbid", populate_by_name=True, alias_generator=to_camel
    )


class ClassSelection(_Model):
    """How one controller (RDT or block I/O) picks a class for a container."""

    enable: bool = False
    use_pod_qos_as_default_class: bool = Field(default=False, alias="usePodQoSAsDefaultClass")
    default_class: str | None = None

    @field_validator("default_class")
    @classmethod
    def _valid_default(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        return validate_name(value, subject="defaultClass", error=ValueError)


class ClassConfig(_Model):
    """`control: {rdt: {...}, blockio: {...}}` selection settings."""

    rdt: ClassSelection = Field(default_factory=ClassSelection)
    blockio: ClassSelection = Field(default_factory=ClassSelection)


@dataclass(frozen=True, slots=True)
class ClassChoice:
    """The classes a container gets; None leaves the runtime's default."""

    rdt_class: str | None = None
    blockio_class: str | None = None


def no_classes(_container: ContainerInfo) -> ClassChoice:
    """The class selector of a pipeline without class controllers: no class."""
    return ClassChoice()


def inherit_classes(new: Assignment, old: Assignment | ClassChoice | None) -> Assignment:
    """`new`, with each class it leaves unset taken from `old` (None: nothing to take).

    The one rule for "keep the old class": a policy decides CPUs and memory, not classes,
    so its assignments inherit the classes chosen at creation (or, for a new container,
    the `ClassChoice`).  Unset is None *or* the empty string: "" is no class name
    (`names.validate_name` refuses it), and sending it would make the runtime look for a
    class called "".  A class unset on both sides stays None.
    """
    if old is None:
        old = ClassChoice()
    rdt = new.rdt_class or old.rdt_class or None
    blockio = new.blockio_class or old.blockio_class or None
    if rdt == new.rdt_class and blockio == new.blockio_class:
        return new  # nothing to take (an update of the many an exclusive grant sends)
    return dataclasses.replace(new, rdt_class=rdt, blockio_class=blockio)


def pod_group_name(pod: Pod) -> str:
    """Name of the resctrl group owned by `pod` (`nri-resmgr-pod-<uid>`), validated."""
    return validate_name(
        POD_GROUP_PREFIX + pod.uid,
        subject=f"pod {pod.namespace}/{pod.name} uid {pod.uid!r} as a resctrl group name",
        error=AnnotationError,
    )


def has_pod_resctrl(pod: Pod) -> bool:
    """True when the pod asks for a resctrl group of its own."""
    return RESCTRL_POD_ANNOTATION in pod.annotations


def _annotation_key(container: ContainerInfo, key: str) -> str:
    """The key form that `ContainerInfo.annotation` found, for messages."""
    for source in (container.pod.annotations, container.annotations):
        for k in (f"{key}/container.{container.name}", f"{key}/pod", key):
            if k in source:
                return k
    return key


def _choose(
    container: ContainerInfo,
    selection: ClassSelection,
    *,
    annotation: str,
    known: Collection[str],
    what: str,
    config_path: str,
    pod_group: str | None,
) -> str | None:
    if not selection.enable:
        return None
    value = container.annotation(annotation)
    if value is not None:
        key = _annotation_key(container, annotation)
        subject = f"{container.pretty}: annotation {key}"
        name = validate_name(value, subject=subject, error=AnnotationError)
        if name not in known:
            listed = ", ".join(sorted(known)) or "(none configured)"
            raise AnnotationError(
                f"{subject} names unknown {what} class {name!r}; expected one of {listed}"
            )
        return name
    if pod_group is not None:
        return pod_group
    qos = str(container.qos_class)
    if selection.use_pod_qos_as_default_class and qos in known:
        return qos
    default = selection.default_class
    if default is not None:
        if default not in known:
            listed = ", ".join(sorted(known)) or "(none configured)"
            raise ConfigError(
                f"{config_path}.defaultClass: expected one of the configured {what} classes "
                f"{listed}; found {default!r}"
            )
        return default
    return None


def select_classes(
    container: ContainerInfo,
    config: ClassConfig,
    *,
    known_rdt: Collection[str],
    known_blockio: Collection[str],
) -> ClassChoice:
    """The RDT and block I/O class names for `container` (see the module docstring)."""
    pod_group = None
    if config.rdt.enable and has_pod_resctrl(container.pod):
        pod_group = pod_group_name(container.pod)
    return ClassChoice(
        rdt_class=_choose(
            container,
            config.rdt,
            annotation=RDT_CLASS_ANNOTATION,
            known=known_rdt,
            what="RDT",
            config_path="control.rdt",
            pod_group=pod_group,
        ),
        blockio_class=_choose(
            container,
            config.blockio,
            annotation=BLOCKIO_CLASS_ANNOTATION,
            known=known_blockio,
            what="block I/O",
            config_path="control.blockio",
            pod_group=None,
        ),
    )
