"""The ``none`` policy: observe every container, change nothing.

Theory of operation: the state is just the set of containers seen (so that a report can
list them).  Every assignment has kind `CPUKind.NONE` and *empty* CPU and memory sets,
which is the contract for "leave alone": the pipeline renders no ``cpuset.cpus`` and no
``cpuset.mems`` adjustment for an empty set, and no update at all for a container whose
assignment is empty.  Classes (RDT, block I/O) are left to their own controllers.

Use it to run the daemon as an observer (metrics, reports) next to the kubelet's own CPU
manager, or to switch pinning off without uninstalling.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from nri_resmgr.model import (
    Assignment,
    ContainerID,
    ContainerInfo,
    CPUKind,
    Decision,
    PolicyState,
)
from nri_resmgr.policy.base import Policy, PolicyRecord
from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.model import Topology
from nri_resmgr.validation import validate

__all__ = ["RECORD", "NoneConfig", "NonePolicy", "NoneState"]


class NoneConfig(BaseModel):
    """The none policy takes no options; unknown keys are an error (typos surface)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True, slots=True)
class NoneState(PolicyState):
    containers: frozenset[ContainerID] = frozenset()


def _untouched(cid: ContainerID) -> Assignment:
    return Assignment(container_id=cid, cpus=IDSet(), mems=IDSet(), kind=CPUKind.NONE)


class NonePolicy(Policy[NoneState]):
    """Changes nothing; every assignment is empty (see the module docstring)."""

    name: ClassVar[str] = "none"

    def __init__(self, *, topology: Topology, config: Mapping[str, Any]) -> None:
        validate(NoneConfig, config, subject="policy none")
        self.topology = topology

    def initial_state(self) -> NoneState:
        return NoneState()

    def allocate(self, state: NoneState, container: ContainerInfo) -> Decision[NoneState]:
        return Decision(
            state=NoneState(state.containers | {container.id}),
            assignment=_untouched(container.id),
            reason="none policy: not pinned",
        )

    def release(self, state: NoneState, container_id: ContainerID) -> Decision[NoneState]:
        return Decision(state=NoneState(state.containers - {container_id}), reason="released")

    def update(self, state: NoneState, container: ContainerInfo) -> Decision[NoneState]:
        return self.allocate(state, container)

    def rebuild(self, containers: Sequence[ContainerInfo]) -> Decision[NoneState]:
        return Decision(
            state=NoneState(frozenset(c.id for c in containers)), reason="none policy: rebuilt"
        )


#: the registration (the ``nri_resmgr.policies`` entry point names it)
RECORD = PolicyRecord(NonePolicy)
