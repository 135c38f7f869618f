"""The shared decision plumbing: renderings in, a `Decision` out; the `Policy[S]` contract."""

from __future__ import annotations

from dataclasses import dataclass

from nri_resmgr.model import Assignment, ContainerID, CPUKind, PolicyState
from nri_resmgr.policy.base import Policy
from nri_resmgr.policy.decide import (
    Renderings,
    decide,
    decide_release,
    diff_updates,
    nothing_to_release,
)
from nri_resmgr.policy.none import NonePolicy, NoneState
from nri_resmgr.policy.static import StaticPolicy, StaticState
from nri_resmgr.policy.topology_aware import TopologyAwarePolicy, TopologyAwareState
from nri_resmgr.topology.cpuset import IDSet
from tests.support.builders import ctr, small

A, B, C = ContainerID("a"), ContainerID("b"), ContainerID("c")


@dataclass(frozen=True, slots=True)
class Cpus(PolicyState):
    """A toy state: each container's CPU list, as text."""

    cpus: tuple[tuple[ContainerID, str], ...]


def _renderings(state: Cpus) -> dict[ContainerID, Assignment]:
    return {
        cid: Assignment(container_id=cid, cpus=IDSet.parse(cpus), mems=IDSet(), kind=CPUKind.SHARED)
        for cid, cpus in state.cpus
    }


def render_all(old: Cpus, new: Cpus, subject: ContainerID) -> tuple[Renderings, Renderings]:
    return _renderings(old), _renderings(new)


def test_decide_reports_the_subject_and_every_other_container_that_changed() -> None:
    old = Cpus(((A, "0-3"), (B, "0-3")))
    new = Cpus(((A, "0-1"), (B, "0-1"), (C, "2-3")))
    d = decide(render_all, old, new, C, "because")
    assert d.state is new
    assert d.assignment == _renderings(new)[C]
    assert d.updates == (_renderings(new)[A], _renderings(new)[B])
    assert d.reason == "because"


def test_decide_release_reports_only_the_others() -> None:
    old = Cpus(((A, "0-1"), (B, "2-3")))
    new = Cpus(((B, "0-3"),))
    d = decide_release(render_all, old, new, A)
    assert (d.state, d.assignment, d.reason) == (new, None, "released")
    assert d.updates == (_renderings(new)[B],)
    assert nothing_to_release(old).state is old
    assert nothing_to_release(old).updates == ()


def test_diff_updates_ignores_unchanged_new_and_skipped_containers() -> None:
    before = _renderings(Cpus(((A, "0"), (B, "1"))))
    after = _renderings(Cpus(((A, "0"), (B, "2"), (C, "3"))))
    assert diff_updates(before, after) == (after[B],)
    assert diff_updates(before, after, skip={B}) == ()


def test_each_built_in_is_a_policy_over_its_own_state() -> None:
    """Typed here (mypy checks the assignments) and run: a decision's state is the
    policy's own state type, with no run-time narrowing."""
    t = small()
    none: Policy[NoneState] = NonePolicy(topology=t, config={})
    static: Policy[StaticState] = StaticPolicy(topology=t, config={})
    topology_aware: Policy[TopologyAwareState] = TopologyAwarePolicy(topology=t, config={})
    c = ctr("a", milli=2000)
    n = none.allocate(none.initial_state(), c).state
    s = static.allocate(static.initial_state(), c).state
    ta = topology_aware.allocate(topology_aware.initial_state(), c).state
    assert n.containers == frozenset({c.id})
    assert len(s.entries[c.id].exclusive) == 2
    assert len(ta.grants[c.id].exclusive) == 2
