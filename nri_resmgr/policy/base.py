"""The policy contract: `Policy[S]`, its optional hooks with their defaults, and `PolicyRecord`.

Theory of operation: a policy is a subclass of `Policy`, generic over the policy's own
state type ``S`` (a frozen `PolicyState` subclass).  It is constructed once per
configuration from the machine's `Topology` and a plain configuration mapping (validated
by the policy's own pydantic model; errors raise `ConfigError`).  Every method is pure: it
takes the current immutable state and returns a `Decision[S]` carrying the next state.
The pipeline holds the state, serializes events, and commits `decision.state` only once
the decision has been accepted and rendered, so a policy never needs to undo anything.
The pipeline only ever hands a policy a state that policy produced, so the type parameter
is all the narrowing a policy needs: it writes ``def allocate(self, state: MyState, ...)``
and never checks the type at run time.

Five methods every policy writes (abstract here):

- `initial_state()`: the state with no containers.
- `allocate(state, container)`: a new container (CreateContainer).  Raises
  `AllocationError` / `AnnotationError` with a message naming pod, container and what
  was asked/found.  Other containers that must change (a shrinking shared pool) are in
  `decision.updates`.
- `release(state, container_id)`: a container stopped or removed; unknown ids are a no-op.
- `update(state, container)`: the container's resources changed (UpdateContainer).
- `rebuild(containers)`: Synchronize: reconstruct the state from what the runtime reports
  (`ContainerInfo.current_cpus/current_mems`), keep valid placements where they are, and
  return updates only for containers that must move.

Hooks a policy may override; the default is what a policy without the feature means, so
the shell calls every hook of every policy and never asks whether one is there:

- ``__init__(topology=, config=)``: the default takes no configuration (a key is an
  error naming it);
- `render(state)`: every container's assignment (None: the policy does not say; the
  pipeline then keeps the assignments its decisions gave);
- `cpu_class_use(state)`: CPU classes wanted now (`NO_CPU_CLASSES`);
- `irq_use(state)`: interrupt wishes now (`NO_IRQ_USE`: what an earlier configuration
  wrote goes back);
- `scheduling`: the checked scheduling classes (`NO_SCHEDULING_CLASSES`), whose
  `nri_requirements` the daemon checks against the runtime;
- `balloons(state)`: the balloons a report and the metrics show (none);
- `pool_cpus(state, assignments)`: the reserved, shared and balloon CPUs the node picture
  shows (`nri_resmgr.policy.pool_report`; by default what the assignments show);
- `fallback(state, container)`: why a placement is not what the container asked for
  ("": it is; the default), which the pod's events show as a warning;
- `check(state)`: raise when `state` breaks the policy's invariants (nothing to check);
- `record(state, container_id)`, `record_layout(state)` and `restore(containers,
  layout)`: a placement's meaning as a record, the policy's own layout (what no
  container's record holds: the balloons policy's empty balloons) as one more, and the
  state those records mean (issue 24; `nri_resmgr.policy.kit.records`).  The default
  records nothing (None) and restores nothing (`RecordError`), so every restart of such
  a policy is its `rebuild`.  The rule that decides when a record counts
  is written once, in `nri_resmgr.policy.kit.rebuild.restart`, for every policy.

`PolicyRecord` is the one registration of a policy: its class (whose ``name`` it
carries), the pydantic model of its keys in nri-plugins' spec form, the keys it accepts
without effect, and the nri-plugins custom resource kind that configures it.  The
``nri_resmgr.policies`` entry point names the record; `nri_resmgr.policy_registry` loads
it and `nri_resmgr.policy_documents` reads kinds, specs and not-implemented keys from it.

`nri_resmgr.policy.kit` holds what the policies share (decision plumbing, rebuild,
constraints, annotations).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic

from pydantic import BaseModel
from typing_extensions import TypeVar

from nri_resmgr.model import (
    Assignment,
    ContainerID,
    ContainerInfo,
    Decision,
    PolicyState,
)
from nri_resmgr.policy.cpu_classes import NO_CPU_CLASSES, CPUClassUse
from nri_resmgr.policy.irq_affinity import NO_IRQ_USE, IrqUse
from nri_resmgr.policy.kit.records import Meaning, RecordError
from nri_resmgr.policy.pool_report import BalloonReportLike, PoolCPUs, pools_from_assignments
from nri_resmgr.policy.sched_classes import NO_SCHEDULING_CLASSES, SchedulingClasses
from nri_resmgr.topology.model import Topology
from nri_resmgr.validation import InvalidConfig, Problem

__all__ = [
    "BalloonReportLike",
    "Policy",
    "PolicyRecord",
    "ResourceKind",
]

#: a policy's own state type.  Where it is not known (the pipeline, the registry: any
#: loaded policy), plain `Policy` means `Policy[Any]`: such a caller only hands a policy
#: back the states that policy gave it, and reads them as `PolicyState`.
S = TypeVar("S", bound=PolicyState, default=Any)


class Policy(ABC, Generic[S]):
    """A resource policy (see the module docstring for the contract and the defaults)."""

    name: ClassVar[str]
    #: the checked scheduling classes (a policy with ``schedulingClasses`` sets its own)
    scheduling: SchedulingClasses = NO_SCHEDULING_CLASSES

    def __init__(self, *, topology: Topology, config: Mapping[str, Any]) -> None:
        if config:
            raise InvalidConfig(
                f"policy {self.name}",
                [
                    Problem("", f"unknown configuration key {key!r}; expected none", at=key)
                    for key in sorted(map(str, config))
                ],
            )
        self.topology = topology

    # ---- the protocol: every policy writes these -----------------------------------

    @abstractmethod
    def initial_state(self) -> S: ...

    @abstractmethod
    def allocate(self, state: S, container: ContainerInfo) -> Decision[S]: ...

    @abstractmethod
    def release(self, state: S, container_id: ContainerID) -> Decision[S]: ...

    @abstractmethod
    def update(self, state: S, container: ContainerInfo) -> Decision[S]: ...

    @abstractmethod
    def rebuild(self, containers: Sequence[ContainerInfo]) -> Decision[S]: ...

    # ---- optional hooks, with what a policy without the feature means ----------------

    def render(self, state: S) -> Mapping[ContainerID, Assignment] | None:
        """Every container's assignment in `state`; None: not rendered by the policy."""
        return None

    def cpu_class_use(self, state: S) -> CPUClassUse:
        """The CPU classes wanted in `state`; by default none."""
        return NO_CPU_CLASSES

    def irq_use(self, state: S) -> IrqUse:
        """The interrupt wishes in `state`; by default none."""
        return NO_IRQ_USE

    def balloons(self, state: S) -> Sequence[BalloonReportLike]:
        """The balloons of `state` for reports and metrics; by default none."""
        return ()

    def pool_cpus(self, state: S, assignments: Iterable[Assignment]) -> PoolCPUs:
        """The reserved, shared and balloon CPUs of `state` for the node picture; by
        default what the live containers' `assignments` show (RESERVED and SHARED ones)."""
        return pools_from_assignments(assignments)

    def fallback(self, state: S, container: ContainerInfo) -> str:
        """Why `container`'s placement in `state` is not what it asked for (a fallback the
        configuration allows, e.g. to shared CPUs), or "" when it is; by default ""."""
        return ""

    def check(self, state: S) -> None:
        """Raise when `state` breaks the policy's invariants (`AssertionError` or
        `ResmgrError`); by default nothing to check."""
        return None

    def record(self, state: S, container_id: ContainerID) -> Meaning | None:
        """What the placement of `container_id` in `state` means, as flat fields a restart
        hands back to `restore` (the pool, kind, grant: what a rebuild would otherwise
        guess); None: nothing recorded (the default: restarts rebuild)."""
        return None

    def record_layout(self, state: S) -> Meaning | None:
        """What `state` holds beyond its containers' records (balloons no container is
        in, their order), as flat fields a restart hands back to `restore`; None: nothing
        (the default: a policy whose containers' records say it all)."""
        return None

    def restore(
        self, containers: Sequence[tuple[ContainerInfo, Meaning]], layout: Meaning | None
    ) -> S:
        """The state holding exactly `containers`, each placed as its recorded meaning
        says (the container is the one the runtime reports now), with the `layout`
        `record_layout` recorded (None: none was).  Raises `RecordError` for a meaning
        this policy cannot read; by default every one (nothing recorded)."""
        raise RecordError(f"policy {self.name} keeps no placement records")


@dataclass(frozen=True, slots=True)
class ResourceKind:
    """The nri-plugins custom resource kind that configures a policy."""

    kind: str  # TopologyAwarePolicy
    plural: str  # topologyawarepolicies


@dataclass(frozen=True, slots=True)
class PolicyRecord:
    """A policy's one registration (see the module docstring)."""

    policy: type[Policy]
    #: the model of the policy's keys in nri-plugins' spec form (None: no such form)
    spec_model: type[BaseModel] | None = None
    #: dotted key path -> the feature it would control, for keys accepted without effect
    not_implemented: Mapping[str, str] = field(default_factory=dict)
    resource: ResourceKind | None = None

    @property
    def name(self) -> str:
        return self.policy.name

    def build(self, *, topology: Topology, config: Mapping[str, Any]) -> Policy:
        """The policy for `topology` with its `config`."""
        return self.policy(topology=topology, config=config)

    def spec_keys(self) -> frozenset[str]:
        """The keys of the spec form (empty without one)."""
        if self.spec_model is None:
            return frozenset()
        fields = self.spec_model.model_fields
        return frozenset(info.alias or name for name, info in fields.items())
