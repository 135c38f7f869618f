"""Domain values: what the policies see of pods and containers, and what they decide.

Theory of operation: the adapter (`nri_resmgr.runtime.adapter`) turns NRI protobuf messages into
these frozen values at the wire edge; nothing below the adapter sees protobuf.  A policy
receives a `ContainerInfo` (the container, its pod, its effective annotations and its
resource `Request`) and answers with a `Decision`: the `Assignment` of the subject
container, the assignments of other containers that must change, and the new policy state
to commit.  The pipeline commits the state only when it accepts the decision, so a failed
or rejected decision leaves nothing behind.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Generic, NewType

from typing_extensions import TypeVar

from nri_resmgr.topology.cpuset import CPUSet, NodeSet

PodID = NewType("PodID", str)
ContainerID = NewType("ContainerID", str)

#: The annotation namespace shared with containers/nri-plugins.
ANNOTATION_DOMAIN = "resource-policy.nri.io"


class QoSClass(enum.StrEnum):
    GUARANTEED = "Guaranteed"
    BURSTABLE = "Burstable"
    BEST_EFFORT = "BestEffort"


class ContainerKind(enum.StrEnum):
    APP = "app"
    INIT = "init"


class CPUKind(enum.StrEnum):
    """How a container's CPUs are held."""

    NONE = "none"  # policy does not pin (none policy, preserve annotation)
    SHARED = "shared"  # the pool's shared subset, changes as exclusive CPUs come and go
    EXCLUSIVE = "exclusive"  # whole CPUs for this container only
    ISOLATED = "isolated"  # exclusive CPUs taken from the kernel's isolcpus
    RESERVED = "reserved"  # the reserved CPUs (kube-system and configured namespaces)
    MIXED = "mixed"  # exclusive CPUs plus a share of the pool's shared CPUs


class MemoryKind(enum.StrEnum):
    DRAM = "dram"
    PMEM = "pmem"
    HBM = "hbm"
    CXL = "cxl"


class SchedPolicy(enum.StrEnum):
    """A Linux scheduling policy (sched_setscheduler(2)); names as nri-plugins spells them."""

    NONE = "none"
    OTHER = "other"
    FIFO = "fifo"
    RR = "rr"
    BATCH = "batch"
    ISO = "iso"
    IDLE = "idle"
    DEADLINE = "deadline"


class SchedFlag(enum.StrEnum):
    """A Linux scheduling flag (SCHED_FLAG_RESET_ON_FORK is ``reset-on-fork``, ...)."""

    RESET_ON_FORK = "reset-on-fork"
    RECLAIM = "reclaim"
    DL_OVERRUN = "dl-overrun"
    KEEP_POLICY = "keep-policy"
    KEEP_PARAMS = "keep-params"
    UTIL_CLAMP_MIN = "util-clamp-min"
    UTIL_CLAMP_MAX = "util-clamp-max"


class IOClass(enum.StrEnum):
    """A Linux I/O scheduling class (ioprio_set(2), ionice(1))."""

    NONE = "none"
    RT = "rt"
    BE = "be"
    IDLE = "idle"


@dataclass(frozen=True, slots=True)
class SchedulingClass:
    """A named set of scheduling and I/O priority attributes a container is given at creation.

    Unset attributes (None, no flags) are not sent: the runtime's defaults stay.
    `runtime`, `deadline` and `period` are passed on as configured (SCHED_DEADLINE).
    """

    name: str
    policy: SchedPolicy | None = None
    priority: int | None = None
    nice: int | None = None
    flags: tuple[SchedFlag, ...] = ()
    runtime: int | None = None
    deadline: int | None = None
    period: int | None = None
    io_class: IOClass | None = None
    io_priority: int | None = None

    @property
    def sets_scheduler(self) -> bool:
        """Whether the class sets any scheduler attribute (NRI's LinuxScheduler)."""
        return (
            self.policy is not None
            or self.priority is not None
            or self.nice is not None
            or bool(self.flags)
            or self.runtime is not None
            or self.deadline is not None
            or self.period is not None
        )

    @property
    def sets_io_priority(self) -> bool:
        """Whether the class sets the I/O priority (NRI's LinuxIOPriority)."""
        return self.io_class is not None or self.io_priority is not None


@dataclass(frozen=True, slots=True)
class Request:
    """A container's resource request, as estimated from the runtime's view of it.

    cpu_request_milli comes from CFS shares (shares * 1000 / 1024), cpu_limit_milli from
    quota/period (None when unlimited), memory_* in bytes (None when unset).
    """

    cpu_request_milli: int = 0
    cpu_limit_milli: int | None = None
    memory_request: int | None = None
    memory_limit: int | None = None


@dataclass(frozen=True, slots=True)
class Pod:
    id: PodID
    uid: str
    name: str
    namespace: str
    qos_class: QoSClass
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    cgroup_parent: str = ""


class HintSource(enum.StrEnum):
    """Where a topology hint comes from (``topologyhints`` annotation types)."""

    DEVICES = "devices"
    MOUNTS = "mounts"
    #: a device the kubelet's device manager allocated (its PodResources API); the
    #: provider is ``podresourceapi:<resource name>``
    POD_RESOURCES = "pod-resources"
    TEST = "test"  # injected by the test.topologyhints annotation


@dataclass(frozen=True, slots=True)
class TopologyHint:
    """The locality of one device or mount a container gets: CPUs and/or NUMA nodes.

    `provider` names what it came from (a sysfs device path, or the annotation's key).
    """

    provider: str
    source: HintSource
    cpus: CPUSet = field(default_factory=CPUSet)
    nodes: NodeSet = field(default_factory=NodeSet)


@dataclass(frozen=True, slots=True)
class DeviceRef:
    """A Linux device given to a container (NRI ``LinuxDevice``): ``c`` or ``b``, numbers."""

    path: str
    type: str
    major: int
    minor: int


@dataclass(frozen=True, slots=True)
class MountRef:
    """A mount given to a container: host source, container destination, read-only."""

    source: str
    destination: str
    read_only: bool = False


@dataclass(frozen=True, slots=True)
class ContainerInfo:
    """One container as a policy sees it."""

    id: ContainerID
    name: str
    pod: Pod
    request: Request
    kind: ContainerKind = ContainerKind.APP
    annotations: Mapping[str, str] = field(default_factory=dict)
    cgroups_path: str = ""
    #: cpuset the runtime reports for it now (Synchronize, UpdateContainer), if any
    current_cpus: CPUSet | None = None
    current_mems: NodeSet | None = None
    #: the locality of the devices and mounts the runtime gives it (CreateContainer),
    #: resolved by the shell from sysfs; the devices and mounts themselves are read from
    #: the message only for that and not kept (nothing reads them afterwards, and a
    #: live node's containers hold several mounts each: rss-1000)
    topology_hints: tuple[TopologyHint, ...] = ()

    @property
    def namespace(self) -> str:
        return self.pod.namespace

    @property
    def qos_class(self) -> QoSClass:
        return self.pod.qos_class

    @property
    def pretty(self) -> str:
        """`namespace/pod container name`, for messages."""
        return f"pod {self.pod.namespace}/{self.pod.name} container {self.name}"

    def annotation(self, key: str) -> str | None:
        """The effective value of `key`: `key/container.NAME` over `key/pod` over `key`.

        Looked up in the pod's annotations (where Kubernetes puts them) and then the
        container's own.
        """
        keys = (f"{key}/container.{self.name}", f"{key}/pod", key)
        for source in (self.pod.annotations, self.annotations):
            if source:  # (a policy asks about 27 keys of each container it places)
                for k in keys:
                    if k in source:
                        return source[k]
        return None


@dataclass(frozen=True, slots=True)
class Assignment:
    """What one container gets."""

    container_id: ContainerID
    cpus: CPUSet
    mems: NodeSet
    kind: CPUKind
    pool: str = ""
    rdt_class: str | None = None
    blockio_class: str | None = None
    #: scheduling and I/O priority, set once at creation (None: the runtime's defaults)
    scheduling: SchedulingClass | None = None


class PolicyState:
    """Marker base for a policy's own immutable allocation state."""

    __slots__ = ()


#: the state type a decision carries (a policy's own; plain `Decision` is any state's)
StateT_co = TypeVar("StateT_co", bound=PolicyState, covariant=True, default=PolicyState)


@dataclass(frozen=True, slots=True)
class Decision(Generic[StateT_co]):
    """A policy's answer: apply all of it, or none of it."""

    state: StateT_co
    #: the subject container's assignment (create, update), None for releases
    assignment: Assignment | None = None
    #: other containers whose cpus/mems/classes must change as a consequence
    updates: tuple[Assignment, ...] = ()
    reason: str = ""


class ResmgrError(Exception):
    """Base of nri_resmgr's own errors; the message names subject, expectation, finding."""


class AllocationError(ResmgrError):
    """A request no pool can satisfy (creation fails with this message)."""


class AnnotationError(ResmgrError):
    """A malformed or unknown annotation value."""


class ConfigError(ResmgrError):
    """Invalid configuration."""
