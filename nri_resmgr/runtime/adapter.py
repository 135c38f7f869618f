"""The wire edge inbound: NRI protobuf messages in, domain values out.

Theory of operation
-------------------
Nothing below this module sees protobuf.  `pod_from_nri` and `container_from_nri` turn a
`PodSandbox` and a `Container` into the frozen `Pod` and `ContainerInfo` values of
`nri_resmgr.model`; the way back, an `Assignment` rendered as the `ContainerAdjustment` /
`ContainerUpdate` the runtime applies, is `nri_resmgr.runtime.adjustments`.  Every
function here is pure: no files, no sockets, no clock.

What the runtime tells us, and how we read it (kubelet computes, containerd passes on):

* **QoS class.**  The kubelet puts every pod in a cgroup named after its QoS class, and
  hands that name to the runtime as the sandbox's cgroup parent:

  ============  ==========================================  ===========================
  class         systemd driver                              cgroupfs driver
  ============  ==========================================  ===========================
  Guaranteed    ``kubepods-pod<uid>.slice``                 ``/kubepods/pod<uid>``
  Burstable     ``kubepods-burstable-pod<uid>.slice``       ``/kubepods/burstable/pod<uid>``
  BestEffort    ``kubepods-besteffort-pod<uid>.slice``      ``/kubepods/besteffort/pod<uid>``
  ============  ==========================================  ===========================

  (the systemd form may come as a full path, ``/kubepods.slice/kubepods-burstable.slice/
  kubepods-burstable-pod<uid>.slice``; only the last component counts).  When the parent
  is not recognised (nerdctl, ``ctr``, another orchestrator, a test) the pod has no class
  of its own: each *container's* class is estimated from that container's resources, the
  way the kubelet would have derived it: no CPU request (shares ≤ 2), no quota and no
  memory limit is BestEffort; a quota equal to the request and a memory limit is
  Guaranteed; anything else is Burstable.  (The `Pod` value still carries an estimate,
  from the sandbox's pod resources or the first container seen, for pod-level use; a
  container's `qos_class` never inherits it: the pod may have been remembered at
  RunPodSandbox, before any container, when there was nothing to estimate from.)

* **CPU request** from CFS shares: the kubelet writes ``max(2, milli * 1024 / 1000)``, so
  the inverse is ``ceil(shares * 1000 / 1024)``, and the minimum of 2 shares means "no
  request" (0).  The ceiling makes the round trip exact for every request ≥ 3m.
* **CPU limit** from quota/period: ``ceil(quota * 1000 / period)``; a missing or
  non-positive quota is "unlimited" (None).
* **Memory limit** from ``memory.limit``; a limit ≤ 0 is "unlimited".  The memory request
  is not passed by the CRI; for a Guaranteed pod it equals the limit, otherwise it is
  read from nri-plugins' resource-annotator annotation ``noderesource.dev/resources``
  when the pod has one (`annotated_memory_request`), else unknown.
* **Annotations**: the pod's Kubernetes annotations arrive on the `PodSandbox`, the
  kubelet's own per-container ones (``io.kubernetes.container.*``) on the `Container`;
  `ContainerInfo.annotation()` resolves the effective value.
* **Init containers.**  Neither the kubelet nor containerd marks a container as an init
  container: the CRI labels are only pod name/namespace/uid and container name, the
  annotations only hash, restart count, termination message and ports.  So we detect them
  from an explicit list on the pod (which a user, a mutating webhook or the simulator sets):

  - ``init-containers.resource-policy.nri.io: "name1,name2"``, or
  - the JSON written by nri-plugins' resource-annotator webhook,
    ``noderesource.dev/resources: {"initContainers": [{"name": ...}], ...}``
    (an object keyed by name is accepted too).

  Any other container is an app container.  This matters little in practice: every
  container's CPUs are released at StopContainer, so an init container hands its CPUs back
  as soon as it exits whatever kind it was taken for.
* **Current placement** (Synchronize, UpdateContainer): ``linux.resources.cpu.cpus/mems``.
* **Labels and annotations are copied with their strings interned** (`_as_dict`): each
  read of a protobuf map makes new `str` objects, and a node's pods repeat the same keys
  (``io.kubernetes.cri.sandbox-id``, ...) and many values (the namespace, the image, the
  sandbox's id and uid again on each of its containers), about 17 strings per container
  in the benchmarks' workload. Interned, every distinct string is held once while it is
  in use (interned strings are freed with their last reference).  The pod's id, uid, name
  and namespace and the container's name are interned too: the labels and annotations
  hold the same strings (``io.kubernetes.pod.uid``, ``io.kubernetes.cri.sandbox-id``,
  ``io.kubernetes.cri.container-name``, ...), about 300 bytes a pod.

Bad input never crashes: a missing linux section, an unparsable cpuset or a garbage
annotation raises `AdapterError` / `AnnotationError` naming the pod, the container, what
was expected and what was found.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import sys
from collections.abc import Mapping

from nri_api import api
from nri_resmgr.limits import DEFAULT_LIMITS, Limits, load_annotation_json
from nri_resmgr.model import (
    ANNOTATION_DOMAIN,
    AnnotationError,
    ContainerID,
    ContainerInfo,
    ContainerKind,
    DeviceRef,
    MountRef,
    Pod,
    PodID,
    QoSClass,
    Request,
    ResmgrError,
)
from nri_resmgr.policy.common import parse_memory_quantity
from nri_resmgr.topology.cpuset import CPUSet, IDSetError
from nri_resmgr.topology.devices import mount_may_hint

__all__ = [
    "INIT_CONTAINERS_ANNOTATION",
    "MIN_SHARES",
    "RESOURCE_ANNOTATOR_ANNOTATION",
    "AdapterError",
    "container_from_nri",
    "cpu_limit_from_quota",
    "cpu_request_from_shares",
    "devices_and_mounts",
    "init_container_names",
    "pod_from_nri",
    "pod_qos_is_known",
    "qos_class_from_cgroup_parent",
    "qos_class_from_request",
    "request_from_resources",
]

#: kubelet's minimum CFS shares (what a container without a CPU request gets)
MIN_SHARES = 2
SHARES_PER_CPU = 1024
#: pod annotation listing the names of its init containers (comma-separated)
INIT_CONTAINERS_ANNOTATION = f"init-containers.{ANNOTATION_DOMAIN}"
#: nri-plugins' resource-annotator webhook output (JSON with initContainers/containers)
RESOURCE_ANNOTATOR_ANNOTATION = "noderesource.dev/resources"


class AdapterError(ResmgrError):
    """An NRI message the adapter cannot turn into domain values."""


_SYSTEMD_RE = re.compile(r"^kubepods(?:-(burstable|besteffort))?-pod[0-9a-fA-F_\-]+\.slice$")
_CGROUPFS_RE = re.compile(r"(?:^|/)kubepods(?:/(burstable|besteffort))?/pod[0-9a-fA-F\-_]+/?$")
_QOS_BY_WORD = {
    None: QoSClass.GUARANTEED,
    "burstable": QoSClass.BURSTABLE,
    "besteffort": QoSClass.BEST_EFFORT,
}


def qos_class_from_cgroup_parent(cgroup_parent: str) -> QoSClass | None:
    """The QoS class encoded in a kubelet pod cgroup name, or None if not recognised."""
    parent = cgroup_parent.strip()
    if not parent:
        return None
    last = parent.rstrip("/").rsplit("/", 1)[-1]
    m = _SYSTEMD_RE.match(last)
    if m is not None:
        return _QOS_BY_WORD[m.group(1)]
    m = _CGROUPFS_RE.search(parent)
    if m is not None:
        return _QOS_BY_WORD[m.group(1)]
    return None


def cpu_request_from_shares(shares: int | None) -> int:
    """Milli-CPUs the kubelet asked for, from CFS shares (≤ 2 shares: no request)."""
    if shares is None or shares <= MIN_SHARES:
        return 0
    return (shares * 1000 + SHARES_PER_CPU - 1) // SHARES_PER_CPU


def cpu_limit_from_quota(quota: int | None, period: int | None) -> int | None:
    """Milli-CPU limit from CFS quota/period; None when unlimited."""
    if quota is None or quota <= 0:
        return None
    if period is None or period <= 0:
        period = 100_000
    return math.ceil(quota * 1000 / period)


def request_from_resources(resources: api.LinuxResources | None) -> Request:
    """The `Request` (without the QoS-dependent memory request) the resources imply."""
    if resources is None:
        return Request()
    cpu = resources.cpu if resources.HasField("cpu") else None
    shares = cpu.shares.value if cpu is not None and cpu.HasField("shares") else None
    quota = cpu.quota.value if cpu is not None and cpu.HasField("quota") else None
    period = cpu.period.value if cpu is not None and cpu.HasField("period") else None
    mem_limit: int | None = None
    if resources.HasField("memory") and resources.memory.HasField("limit"):
        mem_limit = resources.memory.limit.value
        if mem_limit <= 0:
            mem_limit = None
    return Request(
        cpu_request_milli=cpu_request_from_shares(shares),
        cpu_limit_milli=cpu_limit_from_quota(quota, period),
        memory_limit=mem_limit,
    )


def qos_class_from_request(request: Request) -> QoSClass:
    """Estimate the QoS class from one container's resources (fallback only)."""
    if (
        request.cpu_request_milli == 0
        and request.cpu_limit_milli is None
        and request.memory_limit is None
    ):
        return QoSClass.BEST_EFFORT
    if (
        request.cpu_limit_milli is not None
        and request.memory_limit is not None
        and request.cpu_request_milli == request.cpu_limit_milli
    ):
        return QoSClass.GUARANTEED
    return QoSClass.BURSTABLE


def pod_qos_is_known(pod: Pod) -> bool:
    """Whether `pod` sits in a kubelet pod cgroup, which names its QoS class."""
    return qos_class_from_cgroup_parent(pod.cgroup_parent) is not None


def _pod_qos(sandbox: api.PodSandbox, fallback: api.LinuxResources | None) -> QoSClass:
    parent = sandbox.linux.cgroup_parent if sandbox.HasField("linux") else ""
    found = qos_class_from_cgroup_parent(parent)
    if found is not None:
        return found
    if sandbox.HasField("linux") and sandbox.linux.HasField("pod_resources"):
        return qos_class_from_request(request_from_resources(sandbox.linux.pod_resources))
    if fallback is not None:
        return qos_class_from_request(request_from_resources(fallback))
    return QoSClass.BEST_EFFORT


def _as_dict(m: Mapping[str, str]) -> dict[str, str]:
    """A protobuf string map as a dict of interned strings (module docstring); keys by
    the map's own iterator and values by its own lookup, both in C (``dict(m)`` goes
    through `collections.abc`'s keys view, a Python generator)."""
    return {sys.intern(k): sys.intern(m[k]) for k in m}


def pod_from_nri(
    sandbox: api.PodSandbox, *, fallback_resources: api.LinuxResources | None = None
) -> Pod:
    """The domain `Pod` of an NRI `PodSandbox`.

    `fallback_resources` (a container's resources) estimate the QoS class when the cgroup
    parent is not a kubelet pod cgroup and the sandbox carries no pod resources.
    """
    if not sandbox.id:
        raise AdapterError(
            f"pod {sandbox.namespace}/{sandbox.name}: expected a pod sandbox id, found none"
        )
    return Pod(
        id=PodID(sys.intern(sandbox.id)),
        uid=sys.intern(sandbox.uid),
        name=sys.intern(sandbox.name),
        namespace=sys.intern(sandbox.namespace),
        qos_class=_pod_qos(sandbox, fallback_resources),
        labels=_as_dict(sandbox.labels),
        annotations=_as_dict(sandbox.annotations),
        cgroup_parent=sandbox.linux.cgroup_parent if sandbox.HasField("linux") else "",
    )


def init_container_names(
    pod: Pod, *, limits: Limits = DEFAULT_LIMITS, subject: str | None = None
) -> frozenset[str]:
    """Names the pod's annotations declare as init containers (see the module docstring).

    The JSON annotation is read within `limits` (size and depth checked first); an
    `AnnotationError` names `subject` (default: the pod).
    """
    names: set[str] = set()
    listed = pod.annotations.get(INIT_CONTAINERS_ANNOTATION)
    if listed is not None:
        for part in listed.split(","):
            part = part.strip()
            if part:
                names.add(part)
    annotated = pod.annotations.get(RESOURCE_ANNOTATOR_ANNOTATION)
    if annotated is not None:
        names |= _annotator_init_names(
            subject or f"pod {pod.namespace}/{pod.name}", annotated, limits
        )
    return frozenset(names)


def annotated_memory_request(
    pod: Pod, name: str, *, limits: Limits = DEFAULT_LIMITS, subject: str
) -> int | None:
    """The memory request of container `name` in the resource-annotator annotation.

    nri-plugins' resource-annotator webhook writes each container's requirements as
    ``noderesource.dev/resources: {"containers": {NAME: {"requests": {"memory":
    "100M"}, ...}}, "initContainers": {...}}`` (a list of objects with a ``name`` is
    read too); the CRI does not pass a Burstable container's memory request otherwise.
    None when the annotation does not give one.
    """
    text = pod.annotations.get(RESOURCE_ANNOTATOR_ANNOTATION)
    if text is None:
        return None
    where = f"{subject}: annotation {RESOURCE_ANNOTATOR_ANNOTATION}"
    doc = load_annotation_json(text, where=where, limits=limits)
    if not isinstance(doc, Mapping):
        raise AnnotationError(f"{where}: expected a JSON object, found {type(doc).__name__}")
    for section in ("containers", "initContainers"):
        entries = doc.get(section)
        if isinstance(entries, Mapping):
            entry = entries.get(name)
        elif isinstance(entries, list):
            entry = next(
                (e for e in entries if isinstance(e, Mapping) and e.get("name") == name), None
            )
        else:
            continue
        if not isinstance(entry, Mapping):
            continue
        resources = entry.get("resources", entry)
        requests = resources.get("requests") if isinstance(resources, Mapping) else None
        raw = requests.get("memory") if isinstance(requests, Mapping) else None
        if raw is None:
            continue
        amount = parse_memory_quantity(str(raw)) if isinstance(raw, str | int) else None
        if amount is None:
            raise AnnotationError(
                f"{where}: {section}.{name}.requests.memory is {raw!r}; expected a memory "
                "quantity such as 100M or 1Gi"
            )
        return amount
    return None


def _annotator_init_names(subject: str, text: str, limits: Limits) -> set[str]:
    where = f"{subject}: annotation {RESOURCE_ANNOTATOR_ANNOTATION}"
    doc = load_annotation_json(text, where=where, limits=limits)
    if not isinstance(doc, Mapping):
        raise AnnotationError(f"{where}: expected a JSON object, found {type(doc).__name__}")
    inits = doc.get("initContainers") or []
    if isinstance(inits, Mapping):
        return {str(k) for k in inits}
    if not isinstance(inits, list):
        raise AnnotationError(
            f"{where}: initContainers: expected a list or an object, found {type(inits).__name__}"
        )
    names: set[str] = set()
    for i, entry in enumerate(inits):
        if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
            names.add(entry["name"])
        elif isinstance(entry, str):
            names.add(entry)
        else:
            raise AnnotationError(
                f"{where}: initContainers[{i}]: expected an object with a name, found {entry!r}"
            )
    return names


#: once per distinct text: a Synchronize reports each pool's shared set for every container
#: in the pool (about 3,000 parses of some 110 texts at 1,000 containers)
_parse_cpuset = functools.lru_cache(maxsize=4096)(CPUSet.parse)


def _parse_set(text: str, *, what: str, subject: str, limits: Limits) -> CPUSet | None:
    if len(text) > limits.max_cpuset_length:
        raise AdapterError(
            f"{subject}: {what}: expected at most {limits.max_cpuset_length} characters "
            f"(limits.maxCPUSetLength), found {len(text)} ({text[:40]!r}...)"
        )
    if not text.strip():
        return None
    try:
        return _parse_cpuset(text, max_id=limits.max_cpu_id)
    except IDSetError as exc:
        raise AdapterError(
            f"{subject}: {what} {text[:80]!r} is not a kernel id list within "
            f"limits.maxCPUID={limits.max_cpu_id}: {exc}"
        ) from exc


def container_from_nri(
    pod: Pod | api.PodSandbox,
    container: api.Container,
    *,
    resources: api.LinuxResources | None = None,
    kind: ContainerKind | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> ContainerInfo:
    """The domain `ContainerInfo` of an NRI `Container` in its pod.

    `resources` overrides the container's own (UpdateContainer passes the new ones);
    `kind` overrides init-container detection.  Cpusets and JSON annotations are read
    within `limits`; exceeding one raises `AdapterError` / `AnnotationError`.
    """
    name = sys.intern(container.name or container.labels.get("io.kubernetes.container.name", ""))
    if isinstance(pod, api.PodSandbox):
        fallback = container.linux.resources if container.HasField("linux") else None
        pod = pod_from_nri(pod, fallback_resources=fallback)
    subject = f"pod {pod.namespace}/{pod.name} container {name or repr(container.id)}"
    if not container.id:
        raise AdapterError(f"{subject}: expected a container id, found none")
    if not container.HasField("linux"):
        raise AdapterError(
            f"{subject}: expected a linux section (resources, cgroups path), found none"
        )
    res = (
        resources
        if resources is not None
        else (container.linux.resources if container.linux.HasField("resources") else None)
    )
    request = request_from_resources(res)
    if not pod_qos_is_known(pod):
        # not a kubelet pod: the class is the container's own (module docstring)
        own = qos_class_from_request(request)
        if own is not pod.qos_class:
            pod = dataclasses.replace(pod, qos_class=own)
    if pod.qos_class is QoSClass.GUARANTEED and request.memory_limit is not None:
        request = Request(
            cpu_request_milli=request.cpu_request_milli,
            cpu_limit_milli=request.cpu_limit_milli,
            memory_request=request.memory_limit,
            memory_limit=request.memory_limit,
        )
    elif request.memory_request is None:
        annotated = annotated_memory_request(pod, name, limits=limits, subject=subject)
        if annotated is not None:
            request = dataclasses.replace(request, memory_request=annotated)
    current = container.linux.resources if container.linux.HasField("resources") else None
    cur_cpus = cur_mems = None
    if current is not None and current.HasField("cpu"):
        cur_cpus = _parse_set(current.cpu.cpus, what="cpuset.cpus", subject=subject, limits=limits)
        cur_mems = _parse_set(current.cpu.mems, what="cpuset.mems", subject=subject, limits=limits)
    if kind is None:
        init_names = init_container_names(pod, limits=limits, subject=subject)
        kind = ContainerKind.INIT if name in init_names else ContainerKind.APP
    return ContainerInfo(
        id=ContainerID(container.id),
        name=name,
        pod=pod,
        request=request,
        kind=kind,
        annotations=_as_dict(container.annotations),
        cgroups_path=container.linux.cgroups_path,
        current_cpus=cur_cpus,
        current_mems=cur_mems,
    )


def devices_and_mounts(
    container: api.Container,
) -> tuple[tuple[DeviceRef, ...], tuple[MountRef, ...]]:
    """The container's Linux devices (``c``/``b`` with numbers) and its mounts (host
    source, destination, read-only when mounted ``ro``), for topology hints: only the
    mounts that may give one (`mount_may_hint`; a kubelet's ``/etc/hosts`` and
    ``/dev/termination-log`` never do).

    At every creation: ``"ro" in m.options[:]`` looks in a list, where ``in`` on the
    protobuf repeated field itself iterates it through Python (1.1 against 0.4 us a mount).
    """
    devices = tuple(
        DeviceRef(path=d.path, type=d.type, major=d.major, minor=d.minor)
        for d in (container.linux.devices if container.HasField("linux") else ())
        if d.type in ("c", "b")
    )
    mounts = tuple(
        MountRef(source=m.source, destination=m.destination, read_only="ro" in m.options[:])
        for m in container.mounts
        if m.source and mount_may_hint(m.source, m.destination)
    )
    return devices, mounts
