"""Memory QoS: cgroup v2 ``memory.*`` values a container is created with.

Theory of operation
-------------------
nri-plugins v0.14.0 ships this as its ``memory-qos`` plugin (cmd/plugins/memory-qos);
here it is a component beside the policies.  The configuration is theirs, under
``control.memoryQos`` (their plugin's file, top-level ``classes`` and
``unifiedannotations``, loads unchanged, `nri_resmgr.control.memory_documents`)::

    classes:
    - {name: bronze, swaplimitratio: 0.5}
    - {name: silver, swaplimitratio: 0.2}
    unifiedannotations: [memory.swap.max, memory.high]

A container's values come from its pod's annotations, as theirs (``effectiveAnnotations``
and ``CreateContainer`` in their main.go):

* ``class.memory-qos.nri.io`` names a class; a class with ``swaplimitratio`` r > 0 sets
  ``memory.high`` to ``int64(float32(limit) * (1.0 - r))``, computed in float32 exactly as
  their Go does (`memory_high`), and ``memory.swap.max`` to ``max``;
* ``KEY.memory-qos.nri.io`` sets the cgroup v2 file KEY to the annotation's value, for
  the keys listed in ``unifiedannotations`` only (``memory.high``, ``memory.swap.max``,
  ``memory.oom.group``, ...); such a value overrides the one the class computed;
* ``.../NAME`` (theirs) or ``.../container.NAME`` (this project's form) after the key
  makes it the container NAME's, overriding the pod-level value of the same key.

The values travel as the unified (cgroup v2) resources of the creation adjustment, which
every NRI release carries.  runc refuses unified keys on a cgroup v1 host; there the
controller (`nri_resmgr.control.memory`) says so at start and for every container given
values, and the runtime's refusal fails the container: the error reaches the kubelet.

Where this differs from nri-plugins, by design:

* values are checked where they enter: ``swaplimitratio`` within 0..1 (their docs' range;
  their code takes any number), a listed key a cgroup v2 file name, an annotated
  ``memory.high``/``memory.low``/``memory.min``/``memory.swap.max``/``memory.swap.high``
  ``max`` or a byte count (the kernel's memparse suffixes K, M, G, ... allowed),
  ``memory.oom.group`` 0 or 1, any other value one printable line;
* ``class.memory-qos.nri.io/c1: ""`` unsets the pod's class for c1, as their docs say
  (their code looks for a class named "" and fails the container);
* a class that computes ``memory.high`` for a container without a memory limit fails
  it naming the class (theirs: the same when the runtime sends no limit; when it sends 0,
  theirs sets ``memory.high`` to 0, which starves the container).

The configuration models are in `nri_resmgr.control.memory_config` (validated with every
configuration); this module loads only when ``control.memoryQos`` or ``control.sgxEpc``
switches the component on.  Pure: no IO.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass

from nri_resmgr.control.memory_config import MemoryQoSConfig
from nri_resmgr.limits import shown
from nri_resmgr.model import AnnotationError, ContainerInfo

__all__ = [
    "CLASS_ANNOTATION",
    "MemoryQoS",
    "memory_high",
    "qos_for",
]

ANNOTATION_SUFFIX = ".memory-qos.nri.io"
CLASS_ANNOTATION = "class" + ANNOTATION_SUFFIX
#: the kernel's page_counter_memparse: "max" or bytes with an optional memparse suffix
_BYTES = re.compile(r"^(max|[0-9]{1,20}[KkMmGgTtPpEe]?)$")
_BYTES_KEYS = frozenset(
    {"memory.high", "memory.low", "memory.min", "memory.swap.max", "memory.swap.high"}
)
_MAX_VALUE = 256


def _float32(value: float) -> float:
    """`value` rounded to the nearest float32, as a Go float32 holds it."""
    result: float = struct.unpack("<f", struct.pack("<f", value))[0]
    return result


def memory_high(limit: int, ratio: float) -> int:
    """``int64(float32(limit) * (1.0 - ratio))`` with float32 arithmetic (their
    applyQosClass): each operation is rounded to float32, the product truncated."""
    factor = _float32(1.0 - _float32(ratio))
    return int(_float32(_float32(float(limit)) * factor))


@dataclass(frozen=True, slots=True)
class MemoryQoS:
    """The unified (cgroup v2) values a container is created with, and their sources."""

    unified: Mapping[str, str]
    #: the container's memory QoS class (None: none)
    qos_class: str | None = None


def _effective(container: ContainerInfo) -> dict[str, tuple[str, str]]:
    """KEY -> (value, annotation) of the container's memory-qos annotations: a
    container-level one over the pod-level one of the same KEY (their effectiveAnnotations)."""
    merged = {**container.annotations, **container.pod.annotations}
    suffixes = (
        f"{ANNOTATION_SUFFIX}/{container.name}",
        f"{ANNOTATION_SUFFIX}/container.{container.name}",
    )
    pod_level: dict[str, tuple[str, str]] = {}
    ctr_level: dict[str, tuple[str, str]] = {}
    for key, value in merged.items():
        for suffix in suffixes:
            if key.endswith(suffix):
                ctr_level[key.removesuffix(suffix)] = (value, key)
                break
        else:
            if key.endswith(ANNOTATION_SUFFIX):
                pod_level[key.removesuffix(ANNOTATION_SUFFIX)] = (value, key)
    return {**pod_level, **ctr_level}


def _checked_value(container: ContainerInfo, key: str, annotation: str, value: str) -> str:
    where = f"{container.pretty}: annotation {annotation}"
    text = value.strip()
    if key in _BYTES_KEYS and not _BYTES.match(text):
        raise AnnotationError(
            f"{where}: expected max or a byte count (K, M, G... suffixes allowed) for {key}, "
            f"found {shown(value)}"
        )
    if key == "memory.oom.group" and text not in ("0", "1"):
        raise AnnotationError(f"{where}: expected 0 or 1 for {key}, found {shown(value)}")
    if not text or len(text) > _MAX_VALUE or not text.isprintable():
        raise AnnotationError(
            f"{where}: expected one printable line of at most {_MAX_VALUE} characters, "
            f"found {shown(value)}"
        )
    return text


def qos_for(container: ContainerInfo, config: MemoryQoSConfig) -> MemoryQoS:
    """The unified values `container` is created with (module docstring); raises
    `AnnotationError` for an unknown class or key, a bad value, or a class that needs a
    memory limit the container lacks."""
    chosen = _effective(container)
    unified: dict[str, str] = {}
    qos_class: str | None = None
    class_value, class_key = chosen.pop("class", ("", ""))
    if class_value.strip():
        qos_class = class_value.strip()
        found = config.by_name().get(qos_class)
        if found is None:
            known = ", ".join(sorted(config.by_name())) or "none configured"
            raise AnnotationError(
                f"{container.pretty}: annotation {class_key} names memory QoS class "
                f"{shown(qos_class)}; expected one of control.memoryQos.classes ({known})"
            )
        if found.swap_limit_ratio > 0:
            limit = container.request.memory_limit
            if limit is None:
                raise AnnotationError(
                    f"{container.pretty}: memory QoS class {qos_class} (swaplimitratio "
                    f"{found.swap_limit_ratio}) sets memory.high from the memory limit; "
                    "expected a memory limit, found none"
                )
            unified["memory.high"] = str(memory_high(limit, found.swap_limit_ratio))
            unified["memory.swap.max"] = "max"
    for key, (value, annotation) in sorted(chosen.items()):
        if key not in config.unified_annotations:
            listed = ", ".join(config.unified_annotations) or "none"
            raise AnnotationError(
                f"{container.pretty}: annotation {annotation}: expected {CLASS_ANNOTATION} or "
                f"a key of control.memoryQos.unifiedannotations ({listed}), found {shown(key)}"
            )
        unified[key] = _checked_value(container, key, annotation, value)
    return MemoryQoS(unified=unified, qos_class=qos_class)
