"""What a container asks for: CPU kind and amount, memory kinds and amount.

Theory of operation: `container_request` reads the container's QoS class, CPU request,
memory request and effective annotations (``key/container.NAME`` over ``key/pod`` over
``key``) and returns a `ContainerRequest`.  The rules are nri-plugins' defaults
(pod-preferences.go, ``cpuAllocationPreferences``):

===========================================  =============================================
container                                    gets
===========================================  =============================================
``cpu.preserve`` annotated true              no CPU pinning at all (kind NONE)
``prefer-reserved-cpus`` true, or namespace  reserved CPUs (unless annotated false)
in kube-system / ``reservedPoolNamespaces``
BestEffort                                   shared, 0m
Burstable                                    shared, its request; its CPU limit, or
                                             without one its ``unlimited-burstable``
                                             level, ranks the pools (`scoring`)
Guaranteed, request < 1 CPU                  shared
Guaranteed, 1 <= request < 2                 ``prefer-shared``: shared; else 1 exclusive
                                             CPU (+ the fraction shared = MIXED), isolated
                                             when ``prefer-isolated`` (default true)
Guaranteed, request >= 2, whole              ``prefer-shared``: shared; else exclusive,
                                             isolated only if *annotated* prefer-isolated
Guaranteed, request >= 2, fractional         shared, unless *annotated* prefer-shared=false:
                                             then MIXED (isolated only if annotated)
===========================================  =============================================

``irq-affinity`` (`nri_resmgr.policy.irq_affinity.irq_affinity_of`) is read from
Guaranteed containers; a container-scoped one on another QoS class, or on a container
that gets no whole CPUs, is refused (their ``irqAffinityPreference`` and
``buildRequest``).

``preferSharedCPUs`` / ``preferIsolatedCPUs`` in the configuration are the defaults of
the two annotations.  ``require-isolated-cpus`` is ``prefer-isolated-cpus`` made strict
(nri-plugins' ``strictIsolatedCPUsPreference``): of the two, the one at the narrower
scope (``/container.NAME`` before ``/pod`` before bare) gives the value, ``require``
winning a tie; when it is the one and the request ends up isolated, a pool without
enough free isolated CPUs makes no offer, so the container fails rather than being
sliced shared CPUs (and ``fallbackToShared`` does not apply).  A Guaranteed container's
``prefer-cpu-priority`` (`priority`) picks P- or E-cores.  The pod's ``affinity`` and
``anti-affinity`` annotations (and the implicit ``colocatePods``/``colocateNamespaces``
rules) become the request's `affinity.Affinity` rules.

``memory-type`` takes a comma list of ``dram``, ``pmem``, ``hbm``, ``mixed`` (= all
three); without it a container may use every kind its pool has (nri-plugins' default).
``memory.preserve`` leaves ``cpuset.mems`` alone.

Unlike nri-plugins, which logs malformed annotations and carries on with defaults, a
malformed value is an `AnnotationError` naming the annotation and the accepted values,
so the mistake surfaces when the pod starts.

Every annotation read here is in the policy's domain (`model.ANNOTATION_DOMAIN`).  So a
container with no key of that domain on it or its pod asks what any other such container
of the same QoS class, resources and namespace asks, but for who it is (its `Subject`
and its implicit affinity rules): `RequestShapes` works the request out for the first
container of each such shape in a Synchronize or a restart, and makes the others' from
it (most of a node's containers are a few shapes).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from operator import attrgetter

from nri_resmgr.model import (
    ANNOTATION_DOMAIN,
    AnnotationError,
    ContainerInfo,
    CPUKind,
    MemoryKind,
    QoSClass,
)
from nri_resmgr.policy.common import namespace_matches, parse_bool_annotation
from nri_resmgr.policy.irq_affinity import IRQ_AFFINITY, IrqAffinity, irq_affinity_of
from nri_resmgr.policy.kit.annotations import (
    ALL_MEMORY,
    CPU_CLASS,
    CPU_PRESERVE,
    HIDE_HYPERTHREADS,
    MEMORY_PRESERVE,
    MEMORY_TYPE,
    PREFER_ISOLATED,
    PREFER_RESERVED,
    PREFER_SHARED,
    REQUIRE_ISOLATED,
    UNLIMITED_BURSTABLE,
    parse_memory_types,
)
from nri_resmgr.policy.topology_aware.affinity import (
    Affinity,
    Subject,
    container_affinities,
    subject_of,
)
from nri_resmgr.policy.topology_aware.config import ResolvedConfig
from nri_resmgr.policy.topology_aware.pools import TOPOLOGY_LEVELS
from nri_resmgr.policy.topology_aware.priority import CPUPriority, parse_cpu_priority

__all__ = [
    "ALL_MEMORY",
    "CPU_CLASS",
    "CPU_PRESERVE",
    "DEFAULT_MEMORY",
    "HIDE_HYPERTHREADS",
    "MEMORY_PRESERVE",
    "MEMORY_TYPE",
    "PREFER_ISOLATED",
    "PREFER_RESERVED",
    "PREFER_SHARED",
    "REQUIRE_ISOLATED",
    "UNLIMITED_BURSTABLE",
    "ContainerRequest",
    "RequestMemo",
    "RequestShapes",
    "container_request",
    "parse_memory_types",
]

#: the kinds of a container without ``memory-type``: every kind but HBM, which is kept for
#: the containers that ask for it (as nri-plugins, n6-hbm-cxl/test01-memory-types)
DEFAULT_MEMORY = ALL_MEMORY - {MemoryKind.HBM}


@dataclass(frozen=True, slots=True)
class ContainerRequest:
    """The resources one container asks for, after defaults and annotations."""

    #: SHARED, EXCLUSIVE (whole CPUs), MIXED (whole + fraction), RESERVED or NONE (preserve)
    kind: CPUKind
    #: whole exclusive CPUs (EXCLUSIVE, MIXED)
    full: int
    #: millicores on the shared (or reserved) CPUs
    shared_milli: int
    #: try kernel-isolated CPUs for the whole CPUs first
    prefer_isolated: bool
    hide_hyperthreads: bool
    memory_kinds: frozenset[MemoryKind]
    memory_bytes: int
    pin_cpu: bool
    pin_memory: bool
    #: ``prefer-cpu-priority`` (Guaranteed containers; `priority`)
    cpu_priority: CPUPriority = CPUPriority.NONE
    #: ``require-isolated-cpus``: whole CPUs only from the isolated ones, or fail
    require_isolated: bool = False
    #: ``cpu-class`` (Guaranteed containers): the CPU class of its exclusive CPUs
    cpu_class: str = ""
    #: ``irq-affinity`` (Guaranteed containers): interrupts its exclusive CPUs claim or
    #: are masked from (`nri_resmgr.policy.irq_affinity`)
    irq_affinity: IrqAffinity | None = None
    #: the container as affinity expressions of others see it (`affinity`)
    subject: Subject | None = None
    #: its affinity and anti-affinity rules, explicit or implicit (`affinity`)
    affinities: tuple[Affinity, ...] = ()
    #: Burstable with a CPU limit: the limit in millicores (the lowest pool with room
    #: for it wins, `scoring`); 0 otherwise
    limit_milli: int = 0
    #: Burstable without a CPU limit: the topology level it prefers
    #: (``unlimitedBurstable``, the ``unlimited-burstable`` annotation); None otherwise
    unlimited_level: str | None = None
    #: BestEffort, or Burstable with no CPU request: nri-plugins keeps 1m of shared
    #: capacity back in every pool holding such a container (``hasZeroCpuReqContainer``)
    zero_cpu_request: bool = False
    #: Burstable: its memory limit in bytes, 0 without one; pools are ranked by their
    #: memory (``compareScores``' memory offer burstability, `scoring`); None otherwise
    memory_burst: int | None = None

    def describe(self) -> str:
        """``2 exclusive CPUs + 500m shared`` and the like, for messages."""
        parts = []
        if self.full:
            word = "isolated or exclusive" if self.prefer_isolated else "exclusive"
            if self.require_isolated:
                word = "isolated"
            parts.append(f"{self.full} {word} CPU{'s' if self.full != 1 else ''}")
        if self.shared_milli or not self.full:
            parts.append(f"{self.shared_milli}m {self.kind.value if not self.full else 'shared'}")
        text = " + ".join(parts)
        if self.memory_bytes:
            kinds = ",".join(sorted(k.value for k in self.memory_kinds))
            text += f" and {self.memory_bytes} bytes of {kinds} memory"
        return text


def _memory_bytes(container: ContainerInfo) -> int:
    req = container.request
    if container.qos_class is QoSClass.GUARANTEED:
        return req.memory_request or req.memory_limit or 0
    if container.qos_class is QoSClass.BURSTABLE:
        return req.memory_request or 0
    return 0


def _scoped(container: ContainerInfo, key: str) -> tuple[int, str] | None:
    """`container.annotation(key)` with the scope it was found at (0 container, 1 pod, 2 bare)."""
    for source in (container.pod.annotations, container.annotations):
        for scope, k in enumerate((f"{key}/container.{container.name}", f"{key}/pod", key)):
            if k in source:
                return scope, source[k]
    return None


def isolation_preference(container: ContainerInfo) -> tuple[bool | None, bool]:
    """The annotated isolated-CPU preference (None when not annotated) and its strictness.

    ``require-isolated-cpus`` and ``prefer-isolated-cpus`` compete by scope (module
    docstring); a malformed value of the winner is an `AnnotationError`.
    """
    strict = _scoped(container, REQUIRE_ISOLATED)
    loose = _scoped(container, PREFER_ISOLATED)
    if strict is not None and (loose is None or strict[0] <= loose[0]):
        value = parse_bool_annotation(container, REQUIRE_ISOLATED)
        return value, value is True
    return parse_bool_annotation(container, PREFER_ISOLATED), False


def _unlimited_level(container: ContainerInfo, default: str) -> str:
    """The ``unlimited-burstable`` annotation's topology level, or `default`."""
    raw = container.annotation(UNLIMITED_BURSTABLE)
    if raw is None:
        return default
    level = raw.strip().lower()
    if level not in TOPOLOGY_LEVELS:
        raise AnnotationError(
            f'{container.pretty}: annotation {UNLIMITED_BURSTABLE} has value "{raw}"; '
            f"expected one of {', '.join(TOPOLOGY_LEVELS)}"
        )
    return level


def _cpu_class(container: ContainerInfo, config: ResolvedConfig) -> str:
    """The ``cpu-class`` annotation: a Guaranteed container's, naming a defined class."""
    name = (container.annotation(CPU_CLASS) or "").strip()
    if not name:
        return ""
    if container.qos_class is not QoSClass.GUARANTEED:
        raise AnnotationError(
            f"{container.pretty}: annotation {CPU_CLASS}: CPU class {name!r} invalid for "
            f"non-Guaranteed QoS class {container.qos_class}; expected a Guaranteed container"
        )
    if not config.names_cpu_classes:
        raise AnnotationError(
            f"{container.pretty}: annotation {CPU_CLASS} names CPU class {name!r}; expected "
            "no such annotation: no CPU classes are configured (cpuClasses)"
        )
    defined = [c.name for c in config.options.cpu_classes]
    if defined and name not in defined:
        raise AnnotationError(
            f"{container.pretty}: annotation {CPU_CLASS} names CPU class {name!r}; expected "
            f"one of {', '.join(sorted(defined))}"
        )
    return name


def _irq_shown(wish: IrqAffinity) -> str:
    return f"(claim {list(wish.claims)}, mask {list(wish.masks)}, mode {wish.mode})"


def container_request(container: ContainerInfo, config: ResolvedConfig) -> ContainerRequest:
    """Apply the eligibility table (module docstring) to `container`."""
    opts = config.options
    milli = max(container.request.cpu_request_milli, 0)
    cpu_preserve = parse_bool_annotation(container, CPU_PRESERVE) is True
    mem_preserve = parse_bool_annotation(container, MEMORY_PRESERVE) is True
    hide_ht = parse_bool_annotation(container, HIDE_HYPERTHREADS) is True
    prefer_reserved = parse_bool_annotation(container, PREFER_RESERVED)
    iso_annotated, strict = isolation_preference(container)
    shared_annotated = parse_bool_annotation(container, PREFER_SHARED)
    kinds = parse_memory_types(container) or DEFAULT_MEMORY
    rules = container_affinities(
        container,
        colocate_pods=opts.colocate_pods,
        colocate_namespaces=opts.colocate_namespaces,
    )
    subject = subject_of(container)

    qos = container.qos_class
    # nri-plugins reads the annotation of Guaranteed containers only; the others, and
    # ``default``, get ``defaultCPUPriority``
    default_priority = opts.default_cpu_priority
    priority = (
        parse_cpu_priority(container, default_priority)
        if qos is QoSClass.GUARANTEED
        else default_priority
    )

    cpu_class = _cpu_class(container, config)
    irq_wish, irq_scoped = irq_affinity_of(container)
    zero = qos is QoSClass.BEST_EFFORT or (qos is QoSClass.BURSTABLE and milli == 0)
    memory_burst = (container.request.memory_limit or 0) if qos is QoSClass.BURSTABLE else None

    def make(
        kind: CPUKind,
        full: int = 0,
        shared: int = 0,
        isolated: bool = False,
        limit: int = 0,
        level: str | None = None,
    ) -> ContainerRequest:
        if irq_wish is not None and irq_scoped and full == 0:
            # their buildRequest: a container's own wish needs CPUs of its own to move
            raise AnnotationError(
                f"{container.pretty}: annotation {IRQ_AFFINITY}: IRQ affinity "
                f"{_irq_shown(irq_wish)} invalid without exclusive CPUs; expected a "
                "container that gets whole CPUs of its own"
            )
        return ContainerRequest(
            kind=kind,
            full=full,
            shared_milli=shared,
            prefer_isolated=isolated,
            hide_hyperthreads=hide_ht,
            memory_kinds=kinds,
            memory_bytes=_memory_bytes(container),
            pin_cpu=opts.pin_cpu and not cpu_preserve,
            pin_memory=opts.pin_memory and not mem_preserve,
            cpu_priority=priority,
            cpu_class=cpu_class,
            irq_affinity=irq_wish,
            require_isolated=strict and isolated and full > 0,
            subject=subject,
            affinities=rules,
            limit_milli=limit,
            unlimited_level=level,
            zero_cpu_request=zero,
            memory_burst=memory_burst,
        )

    if cpu_preserve:
        return make(CPUKind.NONE, shared=0)
    in_reserved_ns = namespace_matches(container.namespace, config.reserved_namespaces)
    if prefer_reserved or (in_reserved_ns and prefer_reserved is None):
        return make(CPUKind.RESERVED, shared=milli if qos is not QoSClass.BEST_EFFORT else 0)
    if qos is QoSClass.BEST_EFFORT:
        return make(CPUKind.SHARED, shared=0)
    if qos is QoSClass.BURSTABLE:
        limit = container.request.cpu_limit_milli
        if limit:
            return make(CPUKind.SHARED, shared=milli, limit=limit)
        level = _unlimited_level(container, opts.unlimited_burstable)
        return make(CPUKind.SHARED, shared=milli, level=level)

    full, fraction = divmod(milli, 1000)
    prefer_isolated = opts.prefer_isolated_cpus if iso_annotated is None else iso_annotated
    prefer_shared = opts.prefer_shared_cpus if shared_annotated is None else shared_annotated
    if full == 0 or prefer_shared:
        return make(CPUKind.SHARED, shared=milli)
    if full == 1:
        kind = CPUKind.MIXED if fraction else CPUKind.EXCLUSIVE
        return make(kind, full=1, shared=fraction, isolated=prefer_isolated)
    isolated = iso_annotated is True
    if fraction == 0:
        return make(CPUKind.EXCLUSIVE, full=full, isolated=isolated)
    if shared_annotated is False:
        return make(CPUKind.MIXED, full=full, shared=fraction, isolated=isolated)
    return make(CPUKind.SHARED, shared=milli)


class RequestMemo:
    """`container_request` of the last container asked, kept for that very container.

    A creation asks it twice for one frozen `ContainerInfo` (the placement, then the
    decision's note asks the policy's ``fallback`` what the container asked for), and a
    request depends only on the container and the policy's one configuration, so the
    second ask takes the first's answer (about 70 µs on the bench machine).  One memo
    per policy; it holds one container."""

    def __init__(self, config: ResolvedConfig) -> None:
        self.config = config
        self._last: tuple[ContainerInfo, ContainerRequest] | None = None

    def of(self, container: ContainerInfo) -> ContainerRequest:
        """`container_request(container, config)`, asked anew for another container."""
        last = self._last
        if last is not None and last[0] is container:
            return last[1]
        request = container_request(container, self.config)
        self._last = (container, request)
        return request


#: a `ContainerRequest`'s fields in the order its constructor takes them
_FIELDS = tuple(f.name for f in fields(ContainerRequest) if f.init)
_SUBJECT, _AFFINITIES = _FIELDS.index("subject"), _FIELDS.index("affinities")
_values_of = attrgetter(*_FIELDS)


def request_shape(container: ContainerInfo) -> tuple[object, ...] | None:
    """What `container_request` reads of `container` but who it is: its QoS class,
    resources and namespace, when no annotation key of the policy's domain is set on it or
    on its pod; None when one is (module docstring)."""
    pod = container.pod
    for source in (pod.annotations, container.annotations):
        for key in source:
            if ANNOTATION_DOMAIN in key:
                return None
    return (pod.qos_class, container.request, pod.namespace)


class RequestShapes:
    """`container_request` of the many containers of one Synchronize or restart, each
    shape's worked out once (module docstring): a container of a shape seen before gets
    that request with its own subject and affinity rules.  One per rebuild: it keeps a
    request per shape for the policy's one configuration."""

    def __init__(self, config: ResolvedConfig) -> None:
        self.config = config
        self._by_shape: dict[tuple[object, ...], ContainerRequest] = {}

    def of(self, container: ContainerInfo) -> ContainerRequest:
        """`container_request(container, config)` (module docstring)."""
        shape = request_shape(container)
        if shape is None:
            return container_request(container, self.config)
        known = self._by_shape.get(shape)
        if known is None:
            known = self._by_shape[shape] = container_request(container, self.config)
            return known
        opts = self.config.options
        values = list(_values_of(known))
        values[_SUBJECT] = subject_of(container)
        values[_AFFINITIES] = container_affinities(
            container,
            colocate_pods=opts.colocate_pods,
            colocate_namespaces=opts.colocate_namespaces,
        )
        # (positionally: `dataclasses.replace` cost three times as much)
        return ContainerRequest(*values)
