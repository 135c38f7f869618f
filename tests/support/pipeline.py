"""A pipeline under test: counting policies and the NRI messages a runtime sends.

`CountingPolicy` gives every container the next CPU id, records the calls it gets and
fails on demand (`fail_next`); `EmptyClassPolicy` answers with "" classes.  `sandbox`
and `container` make the `PodSandbox` and `Container` messages of a pod (Guaranteed by
default) and its containers, with the resources the kubelet would write for a request;
`gold_slow` chooses the RDT class gold and the block I/O class slow for any container;
`static_pipeline` is the static policy on 4 cores x 2 threads with CPU 0 reserved.
The pipeline, synchronize, decision-log and controller fan-out tests share them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from nri_api import api
from nri_resmgr.control.hooks import ClassChoice
from nri_resmgr.model import (
    Assignment,
    ContainerID,
    ContainerInfo,
    CPUKind,
    Decision,
    PolicyState,
    ResmgrError,
)
from nri_resmgr.policy.base import Policy
from nri_resmgr.policy.static import StaticPolicy
from nri_resmgr.runtime.pipeline import Pipeline
from nri_resmgr.topology.cpuset import CPUSet
from nri_resmgr.topology.synthetic import build_topology
from tests.support.logs import QUIET
from tests.support.messages import ctr

__all__ = [
    "CountState",
    "CountingPolicy",
    "EmptyClassPolicy",
    "container",
    "gold_slow",
    "sandbox",
    "static_pipeline",
]


@dataclass(frozen=True, slots=True)
class CountState(PolicyState):
    held: Mapping[ContainerID, int] = field(default_factory=dict)


class CountingPolicy(Policy):
    """Gives every container one CPU id in order; fails on demand; records calls."""

    name: ClassVar[str] = "counting"

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.fail_next: ResmgrError | None = None

    def initial_state(self) -> CountState:
        return CountState()

    def _a(self, cid: ContainerID, cpu: int) -> Assignment:
        return Assignment(cid, CPUSet([cpu]), CPUSet([0]), CPUKind.EXCLUSIVE, pool="p")

    def allocate(self, state: PolicyState, container: ContainerInfo) -> Decision:
        assert isinstance(state, CountState)
        self.calls.append(("allocate", container.id))
        if self.fail_next is not None:
            exc, self.fail_next = self.fail_next, None
            raise exc
        cpu = max(state.held.values(), default=-1) + 1
        held = {**state.held, container.id: cpu}
        return Decision(CountState(held), self._a(container.id, cpu), reason="counted")

    def release(self, state: PolicyState, container_id: ContainerID) -> Decision:
        assert isinstance(state, CountState)
        self.calls.append(("release", container_id))
        held = {k: v for k, v in state.held.items() if k != container_id}
        return Decision(CountState(held), reason="released")

    def update(self, state: PolicyState, container: ContainerInfo) -> Decision:
        assert isinstance(state, CountState)
        self.calls.append(("update", container.id))
        cpu = state.held[container.id] + 100
        held = {**state.held, container.id: cpu}
        return Decision(CountState(held), self._a(container.id, cpu), reason="resized")

    def rebuild(self, containers: Sequence[ContainerInfo]) -> Decision:
        self.calls.append(("rebuild", ",".join(c.id for c in containers)))
        return Decision(CountState({c.id: i for i, c in enumerate(containers)}))


def sandbox(
    name: str = "p0", *, guaranteed: bool = True, annotations: dict[str, str] | None = None
) -> api.PodSandbox:
    """The sandbox of pod `name` in namespace ``ns``, Guaranteed or Burstable."""
    s = api.PodSandbox(id=f"sb-{name}", name=name, uid=f"uid-{name}", namespace="ns")
    s.linux.cgroup_parent = (
        f"kubepods-pod{name}.slice" if guaranteed else f"kubepods-burstable-pod{name}.slice"
    )
    s.annotations.update(annotations or {})
    return s


def container(
    pod: api.PodSandbox,
    name: str,
    *,
    cpu: str = "1",
    limit: str | None = "1",
    cpus: str = "",
    state: int = api.ContainerState.CONTAINER_RUNNING,
) -> api.Container:
    """A running container of `pod` requesting `cpu` (limit `limit`) and 1G of memory."""
    return ctr(pod, name, cpu=cpu, limit=limit, memory="1G", cpus=cpus, state=state)


class EmptyClassPolicy(CountingPolicy):
    """Answers with "" classes, and re-sends every other container with "" classes."""

    def allocate(self, state: PolicyState, container: ContainerInfo) -> Decision:
        d = super().allocate(state, container)
        assert isinstance(d.state, CountState) and d.assignment is not None
        others = tuple(
            dataclasses.replace(self._a(cid, cpu), rdt_class="", blockio_class="")
            for cid, cpu in d.state.held.items()
            if cid != container.id
        )
        subject = dataclasses.replace(d.assignment, rdt_class="", blockio_class="")
        return Decision(d.state, subject, updates=others, reason=d.reason)


def gold_slow(_c: ContainerInfo) -> ClassChoice:
    """A class selector: RDT class gold, block I/O class slow, for every container."""
    return ClassChoice(rdt_class="gold", blockio_class="slow")


def static_pipeline() -> Pipeline:
    """The static policy on 1 package x 4 cores x 2 threads, CPU 0 reserved."""
    topo = build_topology({"packages": 1, "nodes": 1, "cores": 4, "threads": 2})
    return Pipeline(StaticPolicy(topology=topo, config={"reservedSystemCPUs": "0"}), log=QUIET)
