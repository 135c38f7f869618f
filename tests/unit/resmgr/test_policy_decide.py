"""The shared decision plumbing: renderings in, a `Decision` out; the `Policy[S]` contract."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

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


#: set objects a rendering may hold: some equal but not the same object, as renderings of
#: one state share theirs and renderings of two states may hold equal copies
_SETS = [IDSet.parse(t) for t in ("0-3", "0-3", "0-1", "0-1")]


@given(
    pairs=st.lists(
        st.tuples(
            st.sampled_from(range(4)),
            st.sampled_from(range(4)),
            st.sampled_from(range(4)),
            st.sampled_from(range(4)),
        ),
        max_size=24,
    )
)
def test_diff_updates_compares_every_container_whatever_sets_it_shares(
    pairs: list[tuple[int, int, int, int]],
) -> None:
    """The kept comparison of the last pair of set objects (`diff_updates`) answers for
    that pair only: any run of shared, equal and different sets gives the updates of a
    plain comparison of each container's."""
    before, after = {}, {}
    for n, (c0, c1, m0, m1) in enumerate(pairs):
        cid = ContainerID(f"c{n:02}")
        before[cid] = Assignment(cid, _SETS[c0], _SETS[m0], CPUKind.SHARED)
        after[cid] = Assignment(cid, _SETS[c1], _SETS[m1], CPUKind.SHARED)
    want = tuple(
        after[cid]
        for cid in sorted(after)
        if (before[cid].cpus, before[cid].mems) != (after[cid].cpus, after[cid].mems)
    )
    assert diff_updates(before, after) == want


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
