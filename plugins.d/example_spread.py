"""Example drop-in policy ``spread``: every container on the least-loaded NUMA node.

Theory of operation: this file shows how small a policy can be.  The registry imports
every ``*.py`` file in a configured plugin directory (``plugins.d/`` here) and picks up
each `nri_resmgr.policy.base.Policy` subclass defined in it (or the `PolicyRecord`
naming one), here ``Policy[SpreadState]``: the five methods every policy writes take and
return this policy's own state; the optional hooks keep their defaults, and the
default constructor takes no configuration (a key is an error naming it).

The policy counts containers per NUMA node (nodes with CPUs only).  A new container goes
to the node with the fewest containers, ties broken by the lower node id, and is pinned
to that node's CPUs and memory.  Nothing is exclusive, so no other container ever has
to move: decisions never carry updates.  ``rebuild`` keeps a container on its node when
its current CPUs are exactly one node's CPUs, and re-places it otherwise.

State is an immutable mapping container id -> node id; every method returns a new one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from nri_resmgr.model import (
    Assignment,
    ContainerID,
    ContainerInfo,
    CPUKind,
    Decision,
    PolicyState,
)
from nri_resmgr.policy.base import Policy
from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.model import Topology


@dataclass(frozen=True, slots=True)
class SpreadState(PolicyState):
    node_of: Mapping[ContainerID, int]


class SpreadPolicy(Policy[SpreadState]):
    """Pin each container to the NUMA node with the fewest containers."""

    name: ClassVar[str] = "spread"

    def __init__(self, *, topology: Topology, config: Mapping[str, Any]) -> None:
        super().__init__(topology=topology, config=config)
        self.nodes = topology.node_ids(with_cpus=True)

    def initial_state(self) -> SpreadState:
        return SpreadState(node_of={})

    def _assign(self, cid: ContainerID, node: int) -> Assignment:
        return Assignment(
            container_id=cid,
            cpus=self.topology.node_cpus(node),
            mems=IDSet([node]),
            kind=CPUKind.SHARED,
            pool=f"node{node}",
        )

    def _place(self, node_of: Mapping[ContainerID, int], cid: ContainerID) -> SpreadState:
        load = {n: 0 for n in self.nodes}
        for n in node_of.values():
            load[n] += 1
        best = min(self.nodes, key=lambda n: (load[n], n))
        return SpreadState(node_of={**node_of, cid: best})

    def allocate(self, state: SpreadState, container: ContainerInfo) -> Decision[SpreadState]:
        known = container.id in state.node_of
        new = state if known else self._place(state.node_of, container.id)
        node = new.node_of[container.id]
        return Decision(
            state=new, assignment=self._assign(container.id, node), reason=f"node{node}"
        )

    def release(self, state: SpreadState, container_id: ContainerID) -> Decision[SpreadState]:
        rest = {k: v for k, v in state.node_of.items() if k != container_id}
        return Decision(state=SpreadState(node_of=rest), reason="released")

    def update(self, state: SpreadState, container: ContainerInfo) -> Decision[SpreadState]:
        return self.allocate(state, container)

    def rebuild(self, containers: Sequence[ContainerInfo]) -> Decision[SpreadState]:
        node_of: dict[ContainerID, int] = {}
        moved = []
        for c in containers:
            here = [n for n in self.nodes if self.topology.node_cpus(n) == c.current_cpus]
            if here:
                node_of[c.id] = here[0]
        for c in containers:
            if c.id not in node_of:
                node_of = dict(self._place(node_of, c.id).node_of)
                moved.append(self._assign(c.id, node_of[c.id]))
        return Decision(state=SpreadState(node_of=node_of), updates=tuple(moved), reason="rebuilt")
