"""The balloons policy: containers in balloons of CPUs that inflate and deflate.

Theory of operation: the configuration (`config.resolve_config`) lists balloon types;
`matching.balloon_type_of` picks a container's type.  A type has instances, *balloons*
(`state.Balloon`), each with its own CPUs; ``minBalloons`` of each are there from the
start (`sizing.Sizing.initial`), up to ``maxBalloons`` (0: no limit) are created as
containers need them, and those beyond ``minBalloons`` go away when their last
container does.  This module is the `Policy` protocol only; each hook delegates:

- `sizing`: the resolved configuration and balloon sizes, the CPUs a balloon takes and
  gives back (`allocation`'s CPU tree, with each type's `hints`), composites, the
  initial state;
- `placement`: which balloon a container joins (nri-plugins' fill chain, a table of
  steps), leaving preserved containers alone, deflating on release;
- `views`: what containers see (own plus shared idle CPUs, memory zones that only
  widen) and the rendered assignments and updates;
- `rebuild`: the state after a restart, from where containers report they run;
- `outputs`: CPU classes, interrupts and the balloons report the shell reads.

An update re-places a container with its current balloon tried first (the old balloon
keeps its CPUs until then, and only then settles).  A new container is created with a
scheduling class (`sched_classes`): the one its ``scheduling-class`` annotation names,
else its balloon type's ``schedulingClass``.  Every decision's updates are the other
containers whose rendered CPUs or memory changed (`decide.decide`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, ClassVar

from nri_resmgr.model import (
    AllocationError,
    Assignment,
    ContainerID,
    ContainerInfo,
    Decision,
)
from nri_resmgr.policy.balloons import outputs, placement, rebuild, views
from nri_resmgr.policy.balloons.config import ResolvedConfig
from nri_resmgr.policy.balloons.invariants import check_invariants
from nri_resmgr.policy.balloons.matching import balloon_type_of
from nri_resmgr.policy.balloons.outputs import BalloonReport
from nri_resmgr.policy.balloons.sizing import Sizing
from nri_resmgr.policy.balloons.spec import BalloonType
from nri_resmgr.policy.balloons.state import Balloon, BalloonsState
from nri_resmgr.policy.base import Policy
from nri_resmgr.policy.cpu_classes import CPUClassUse
from nri_resmgr.policy.decide import decide, decide_release, nothing_to_release
from nri_resmgr.policy.irq_affinity import IrqUse
from nri_resmgr.policy.pool_report import PoolCPUs, balloon_cpus
from nri_resmgr.policy.sched_classes import SchedulingClasses, with_scheduling
from nri_resmgr.topology.cpuset import CPUSet
from nri_resmgr.topology.model import Topology

__all__ = ["BalloonReport", "BalloonsPolicy"]


class BalloonsPolicy(Policy[BalloonsState]):
    """nri-plugins' balloons policy, as pure functions (module docstring)."""

    name: ClassVar[str] = "balloons"

    def __init__(self, *, topology: Topology, config: Mapping[str, Any]) -> None:
        #: the resolved configuration and the sizing steps every module shares
        self.sizing = Sizing(topology=topology, config=config)
        self.topology = topology
        self.config: ResolvedConfig = self.sizing.config
        self.types: Mapping[str, BalloonType] = self.sizing.types
        #: the reserved balloon's home (`sizing.Sizing.reserved_home`)
        self.reserved_home: CPUSet = self.sizing.reserved_home
        #: the scheduling classes (the contract's `scheduling` hook; the daemon checks them)
        self.scheduling: SchedulingClasses = self.config.scheduling

    def needed_cpus(self, b: Balloon, milli: int, *, occupied: bool) -> int:
        """`sizing.Sizing.needed_cpus`."""
        return self.sizing.needed_cpus(b, milli, occupied=occupied)

    def component_share(self, b: Balloon, milli: int) -> int:
        """`sizing.Sizing.component_share`."""
        return self.sizing.component_share(b, milli)

    def preserved(self, c: ContainerInfo) -> str | None:
        """Why the policy leaves `c` alone (`placement.preserved`), or None."""
        return placement.preserved(self.sizing, c)

    # ---- the protocol --------------------------------------------------------------

    def initial_state(self) -> BalloonsState:
        st = self.sizing.initial()
        if isinstance(st, str):
            raise AllocationError(st)
        return st

    def _render_changed(
        self, old: BalloonsState, new: BalloonsState, cid: ContainerID
    ) -> tuple[dict[ContainerID, Assignment], dict[ContainerID, Assignment]]:
        return views.render_changed(self.sizing, old, new, cid)

    def allocate(self, state: BalloonsState, container: ContainerInfo) -> Decision[BalloonsState]:
        if container.id in state.members:
            return self.update(state, container)
        why = self.preserved(container)
        if why is not None:
            return placement.leave_alone(self.sizing, state, container, why)
        new, reason = placement.add(self.sizing, state, container)
        new = views.follow_mems(self.sizing, state, new)
        t = self.types[new.balloons[new.members[container.id].balloon].type]
        scheduling = self.scheduling.resolve(container, default=t.scheduling_class or None)
        decision = decide(self._render_changed, state, new, container.id, reason)
        return with_scheduling(decision, scheduling)

    def release(self, state: BalloonsState, container_id: ContainerID) -> Decision[BalloonsState]:
        if container_id not in state.members:
            return nothing_to_release(state)
        dropped = placement.drop(self.sizing, state, container_id)
        new = views.follow_mems(self.sizing, state, dropped)
        return decide_release(self._render_changed, state, new, container_id)

    def update(self, state: BalloonsState, container: ContainerInfo) -> Decision[BalloonsState]:
        old = state.members.get(container.id)
        if old is None:
            return self.allocate(state, container)
        why = self.preserved(container)
        if why is not None:
            return placement.leave_alone(self.sizing, state, container, why)
        t = balloon_type_of(container, self.config)
        fresh = replace(placement.member(container, t), balloon=old.balloon, memory=old.memory)
        if state.balloons[old.balloon].type == t.name and fresh == old:
            return decide(self._render_changed, state, state, container.id, "unchanged")
        # the old balloon keeps its CPUs until the container is placed again, so that
        # it can stay there, resized; only then is the old balloon settled
        without = state.without_member(container.id)
        new, reason = placement.add(self.sizing, without, container, prefer=old.balloon)
        if new.members[container.id].balloon != old.balloon:
            new = placement.settle(self.sizing, new, old.balloon)
        else:  # it keeps its memory zone, which follows the balloon as the others' do
            new = new.with_member(replace(new.members[container.id], memory=old.memory))
        new = views.follow_mems(self.sizing, state, new)
        return decide(self._render_changed, state, new, container.id, f"updated: {reason}")

    def rebuild(self, containers: Sequence[ContainerInfo]) -> Decision[BalloonsState]:
        return rebuild.rebuild(self.sizing, containers, self.allocate)

    def render(self, state: BalloonsState) -> dict[ContainerID, Assignment]:
        """Every container's assignment in `state`."""
        return views.render(self.sizing, state)

    def cpu_classes(self, state: BalloonsState) -> dict[str, CPUSet]:
        """CPU class name -> its CPUs in `state` (`outputs.cpu_classes`)."""
        return outputs.cpu_classes(self.sizing, state)

    def cpu_class_use(self, state: BalloonsState) -> CPUClassUse:
        return outputs.cpu_class_use(self.sizing, state)

    def irq_use(self, state: BalloonsState) -> IrqUse:
        return outputs.irq_use(self.sizing, state)

    def balloons(self, state: BalloonsState) -> tuple[BalloonReport, ...]:
        """The report hook (`outputs.balloons`)."""
        return outputs.balloons(self.sizing, state)

    def pool_cpus(self, state: BalloonsState, assignments: Iterable[Assignment]) -> PoolCPUs:
        """Every balloon (`balloons`): its CPUs are what the picture marks, not pools."""
        return PoolCPUs(balloons=balloon_cpus(self.balloons(state)))

    def check(self, state: BalloonsState) -> None:
        """`invariants.check_invariants` of `state`."""
        check_invariants(self.sizing, state)
