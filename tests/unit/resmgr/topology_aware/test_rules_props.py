"""nri-plugins' shared-pool rule in the topology-aware policy, as properties over random
create/remove steps on `small()`: with nobody sharing, every free CPU can go exclusive;
shared containers always keep shared CPUs (nri-plugins ``AllocatableSharedCPU() >=
1000*cnt``, one milli kept back for 0m containers).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nri_resmgr.model import (
    AllocationError,
    ContainerInfo,
    CPUKind,
    QoSClass,
)
from nri_resmgr.policy.topology_aware import TopologyAwarePolicy, TopologyAwareState
from nri_resmgr.topology.cpuset import CPUSet
from tests.support.builders import BE, GU, ctr, small, with_current
from tests.support.topology_aware import guaranteed


@dataclass(frozen=True)
class Step:
    create: bool
    slot: int
    qos: QoSClass
    milli: int
    system: bool


STEPS = st.lists(
    st.builds(
        Step,
        create=st.booleans() | st.just(True),
        slot=st.integers(0, 7),
        qos=st.sampled_from(list(QoSClass)),
        milli=st.sampled_from([0, 100, 250, 500, 1000, 2000, 3000, 4000, 7000]),
        system=st.sampled_from([False, False, False, True]),
    ),
    max_size=20,
)


def step_container(step: Step) -> ContainerInfo:
    milli = 0 if step.qos is BE else step.milli
    ns = "kube-system" if step.system else "default"
    return ctr(f"c{step.slot}", pod=f"pod{step.slot}", ns=ns, qos=step.qos, milli=milli,
               cid=f"c{step.slot}")  # fmt: skip


def free_sharable(policy: TopologyAwarePolicy, state: TopologyAwareState) -> CPUSet:
    return state.supply.shared[policy.tree.root.index]


def run_steps(
    policy: TopologyAwarePolicy, steps: Sequence[Step]
) -> tuple[TopologyAwareState, dict[str, ContainerInfo]]:
    state = policy.initial_state()
    live: dict[str, ContainerInfo] = {}
    for step in steps:
        c = step_container(step)
        if step.create and c.name not in live:
            try:
                state = policy.allocate(state, c).state
            except AllocationError:
                continue
            live[c.name] = c
        elif not step.create and c.name in live:
            state = policy.release(state, live.pop(c.name).id).state
        policy.check(state)
        shared_users(policy, state)
    return state, live


def shared_users(policy: TopologyAwarePolicy, state: TopologyAwareState) -> None:
    """Shared containers are on non-empty sets holding no exclusive CPU."""
    rendered = policy.render(state)
    exclusive = state.supply.used
    for cid, g in state.grants.items():
        if g.kind in (CPUKind.SHARED, CPUKind.MIXED):
            shown = rendered[cid].cpus - g.exclusive
            assert shown, f"{cid} is on an empty shared set"
            assert not shown & exclusive, f"{cid} shares exclusive CPUs {shown & exclusive}"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=STEPS, whole=st.integers(1, 15))
def test_with_nobody_sharing_every_free_cpu_can_go_exclusive(steps: list[Step], whole: int) -> None:
    """An exclusive request fits whenever nobody shares and enough CPUs are free.

    Before the rule, the last free shared CPU of every pool stayed behind: a request
    for all of them was refused.
    """
    policy = TopologyAwarePolicy(topology=small(), config={})
    exclusive_only = [s for s in steps if s.qos is GU and s.milli % 1000 == 0 and s.milli]
    state, _ = run_steps(policy, exclusive_only)
    if any(g.kind is not CPUKind.EXCLUSIVE for g in state.grants.values()):
        return  # a 1-CPU request may go mixed/isolated: not this property's subject
    free = free_sharable(policy, state)
    if whole > len(free):
        return
    d = policy.allocate(state, guaranteed("x", 1000 * whole))
    policy.check(d.state)
    assert d.assignment is not None and len(d.assignment.cpus) == whole


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=STEPS, fallback=st.booleans())
def test_shared_containers_keep_shared_cpus(steps: list[Step], fallback: bool) -> None:
    """Random create/delete: the invariants (with the new rules) hold at every step,
    shared containers never run on an empty or exclusive set, the reserved demand
    stays within the reserved capacity, and a rebuild from the rendering moves nobody."""
    policy = TopologyAwarePolicy(topology=small(), config={"fallbackToShared": fallback})
    state, live = run_steps(policy, steps)
    reserved = sum(
        g.request.shared_milli for g in state.grants.values() if g.kind is CPUKind.RESERVED
    )
    assert reserved <= 750
    rendered = policy.render(state)
    reports = [with_current(c, rendered[c.id].cpus, rendered[c.id].mems) for c in live.values()]
    again = policy.rebuild(reports)
    policy.check(again.state)
    if not fallback:
        assert again.updates == (), again.reason
