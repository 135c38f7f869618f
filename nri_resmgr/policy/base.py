"""The policy contract: `Policy[S]`, generic over the policy's own state type.

Theory of operation: a policy is constructed once per configuration from the machine's
`Topology` and a plain configuration mapping (validated by the policy's own pydantic
model; errors raise `ConfigError`).  Every method is pure: it takes the current immutable
state, of the policy's own type ``S`` (a frozen `PolicyState` subclass), and returns a
`Decision[S]` carrying the next state.  The pipeline holds the state, serializes events,
and commits `decision.state` only once the decision has been accepted and rendered, so a
policy never needs to undo anything.  The pipeline only ever hands a policy a state that
policy produced, so the type parameter is all the narrowing a policy needs: it writes
``def allocate(self, state: MyState, ...)`` and never checks the type at run time.

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

`nri_resmgr.policy.decide` holds the plumbing every placement policy shares (the diff
of renderings that finds the updates); `nri_resmgr.policy_registry` finds policies by
name (built-ins, installed distributions, drop-in files).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Protocol

from typing_extensions import TypeVar

from nri_resmgr.model import ContainerID, ContainerInfo, Decision, PolicyState
from nri_resmgr.topology.model import Topology

__all__ = ["Policy", "PolicyFactory"]

#: a policy's own state type.  Where it is not known (the pipeline, the registry: any
#: loaded policy), plain `Policy` means `Policy[Any]`: such a caller only hands a policy
#: back the states that policy gave it, and reads them as `PolicyState`.
S = TypeVar("S", bound=PolicyState, default=Any)


class Policy(Protocol[S]):
    name: ClassVar[str]

    def initial_state(self) -> S: ...

    def allocate(self, state: S, container: ContainerInfo) -> Decision[S]: ...

    def release(self, state: S, container_id: ContainerID) -> Decision[S]: ...

    def update(self, state: S, container: ContainerInfo) -> Decision[S]: ...

    def rebuild(self, containers: Sequence[ContainerInfo]) -> Decision[S]: ...


class PolicyFactory(Protocol):
    """What the registry loads: a class (or callable) building a policy."""

    name: ClassVar[str]

    def __call__(self, *, topology: Topology, config: Mapping[str, Any]) -> Policy: ...
