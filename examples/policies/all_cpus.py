"""The smallest complete policy: every container on the available CPUs and their DRAM.

Theory of operation: one package (this file) and one registration record (``RECORD``,
named by an entry point in the ``nri_resmgr.policies`` group) are all a policy is.  The
state is the set of containers seen; every container gets the same assignment, so no
decision ever moves another container.  The kit reads ``availableResources.cpu`` (and
reports a bad value at its path), `validate` words every problem of the configuration,
and a rebuild updates exactly the containers whose reports differ.  The hooks this
policy does not override (CPU classes, interrupts, scheduling classes, the balloons
report, invariants) keep the contract's defaults.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from nri_resmgr.model import Assignment, ContainerID, ContainerInfo, CPUKind, Decision, PolicyState
from nri_resmgr.policy.base import Policy, PolicyRecord
from nri_resmgr.policy.kit.constraints import available_cpus, dram_near
from nri_resmgr.policy.kit.rebuild import each_once, moved
from nri_resmgr.topology.model import Topology
from nri_resmgr.validation import validate


class Resources(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    cpu: str | None = None


class AllCPUsConfig(BaseModel):
    """The keys: ``availableResources.cpu`` (``cpuset:LIST`` or ``exclude-cpuset:LIST``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    available_resources: Resources = Field(default_factory=Resources, alias="availableResources")


@dataclass(frozen=True, slots=True)
class AllCPUsState(PolicyState):
    containers: frozenset[ContainerID] = frozenset()


class AllCPUsPolicy(Policy[AllCPUsState]):
    """Every container on the available CPUs (see the module docstring)."""

    name: ClassVar[str] = "all-cpus"

    def __init__(self, *, topology: Topology, config: Mapping[str, Any]) -> None:
        subject = f"policy {self.name}"
        opts = validate(AllCPUsConfig, config, subject=subject)
        self.topology = topology
        cpu = opts.available_resources.cpu
        self.cpus = available_cpus(topology.online_cpus(), cpu, subject=subject)
        self.mems = dram_near(topology, self.cpus)

    def _assign(self, cid: ContainerID) -> Assignment:
        return Assignment(cid, self.cpus, self.mems, CPUKind.SHARED, pool="all")

    def render(self, state: AllCPUsState) -> dict[ContainerID, Assignment]:
        return {cid: self._assign(cid) for cid in sorted(state.containers)}

    def initial_state(self) -> AllCPUsState:
        return AllCPUsState()

    def allocate(self, state: AllCPUsState, container: ContainerInfo) -> Decision[AllCPUsState]:
        new = AllCPUsState(state.containers | {container.id})
        return Decision(new, self._assign(container.id), reason="all available CPUs")

    def release(self, state: AllCPUsState, container_id: ContainerID) -> Decision[AllCPUsState]:
        return Decision(AllCPUsState(state.containers - {container_id}), reason="released")

    def update(self, state: AllCPUsState, container: ContainerInfo) -> Decision[AllCPUsState]:
        return self.allocate(state, container)

    def rebuild(self, containers: Sequence[ContainerInfo]) -> Decision[AllCPUsState]:
        seen = each_once(containers)
        state = AllCPUsState(frozenset(c.id for c in seen))
        return Decision(state, updates=moved(seen, self.render(state)), reason="rebuilt")


#: the registration: ``all-cpus = "all_cpus:RECORD"`` in the ``nri_resmgr.policies`` group
RECORD = PolicyRecord(AllCPUsPolicy, spec_model=AllCPUsConfig)
