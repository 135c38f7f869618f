"""The policy contract.

Theory of operation: a policy is constructed once per configuration from the machine's
`Topology` and a plain configuration mapping (validated by the policy's own pydantic
model; errors raise `ConfigError`).  Every method is pure: it takes the current immutable
`PolicyState` and returns a `Decision` carrying the next state.  The pipeline holds the
state, serializes events, and commits `decision.state` only once the decision has been
accepted and rendered, so a policy never needs to undo anything.

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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Protocol

from nri_resmgr.model import ContainerID, ContainerInfo, Decision, PolicyState
from nri_resmgr.topology.model import Topology


class Policy(Protocol):
    name: ClassVar[str]

    def initial_state(self) -> PolicyState: ...

    def allocate(self, state: PolicyState, container: ContainerInfo) -> Decision: ...

    def release(self, state: PolicyState, container_id: ContainerID) -> Decision: ...

    def update(self, state: PolicyState, container: ContainerInfo) -> Decision: ...

    def rebuild(self, containers: Sequence[ContainerInfo]) -> Decision: ...


class PolicyFactory(Protocol):
    """What the registry loads: a class (or callable) building a policy."""

    name: ClassVar[str]

    def __call__(self, *, topology: Topology, config: Mapping[str, Any]) -> Policy: ...
