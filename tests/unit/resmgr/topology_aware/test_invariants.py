"""The topology-aware policy's invariants: the checker catches broken states, problems are
returned as values, and a decision writes nothing into the state it is given.
"""

from __future__ import annotations

import pickle
from dataclasses import replace

import pytest

from nri_resmgr.model import (
    ContainerID,
    CPUKind,
)
from nri_resmgr.policy.topology_aware import (
    InvariantError,
    TopologyAwarePolicy,
    TopologyAwareState,
)
from nri_resmgr.policy.topology_aware.invariants import check_addition, invariant_problems
from nri_resmgr.topology.cpuset import IDSet
from tests.support.builders import BU, ctr, small, with_current


def test_invariant_checker_catches_broken_states() -> None:
    p = TopologyAwarePolicy(topology=small(), config={})
    s = p.allocate(p.initial_state(), ctr("a", pod="a", milli=2000)).state
    assert isinstance(s, TopologyAwareState)
    grant = next(iter(s.grants.values()))
    twin = replace(grant, container_id=ContainerID("twin"))
    broken = s.with_grant(twin)
    with pytest.raises(InvariantError, match="cpu 2 is exclusive to both a-a and twin"):
        p.check(broken)
    emptied = s.with_grant(
        replace(grant, container_id=ContainerID("x"), exclusive=IDSet.parse("3,11"))
    )
    p.check(emptied)  # nobody shares node1: its shared set may be sliced empty
    sharer = replace(
        grant,
        container_id=ContainerID("s"),
        kind=CPUKind.SHARED,
        exclusive=IDSet(),
        request=replace(grant.request, kind=CPUKind.SHARED, full=0, shared_milli=0),
    )
    starved = emptied.with_grant(sharer)
    with pytest.raises(InvariantError, match="node1: shared set is empty under 1 shared"):
        p.check(starved)


def test_a_decision_writes_nothing_into_the_state_it_is_given() -> None:
    """The supply is part of a state when it is built: deciding against a state (its
    supply read for offers, rendering and the invariants) leaves that state as it was,
    down to the last derived figure."""
    p = TopologyAwarePolicy(topology=small(), config={})
    s = p.initial_state()
    for c in (ctr("a", pod="a", milli=2000), ctr("b", pod="b", qos=BU, milli=500)):
        frozen = pickle.dumps(s)
        d = p.allocate(s, c)
        assert pickle.dumps(s) == frozen
        assert isinstance(d.state, TopologyAwareState)
        s = d.state
    frozen = pickle.dumps(s)
    p.check(s)
    p.release(s, ContainerID("a-a"))
    p.rebuild([with_current(ctr("a", pod="a", milli=2000), IDSet.parse("2,10"), None)])
    assert pickle.dumps(s) == frozen


def test_invariant_problems_are_returned_not_raised() -> None:
    """The invariants are a list of problems; only `check_invariants` raises."""
    p = TopologyAwarePolicy(topology=small(), config={})
    s = p.allocate(p.initial_state(), ctr("a", pod="a", milli=2000)).state
    assert isinstance(s, TopologyAwareState)
    assert invariant_problems(p.topology, s) == ()
    grant = next(iter(s.grants.values()))
    twin = replace(grant, container_id=ContainerID("twin"))
    assert check_addition(p.topology, s, twin) == (
        "cpu 2 is exclusive to both a-a and twin",
        "cpu 10 is exclusive to both a-a and twin",
    )
    moved = replace(twin, exclusive=IDSet.parse("4,12"))
    assert check_addition(p.topology, s, moved) == ("twin: exclusive 4,12 outside pool node1",)
