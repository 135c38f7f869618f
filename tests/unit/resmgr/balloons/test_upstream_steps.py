"""The balloons policy takes its steps in nri-plugins' order, so it picks the same CPUs.

Each test shows one case where doing a step at another time (or at once) picks other
CPUs than nri-plugins' balloons plugin v0.14.0 does: the order the initial balloons are
made in, a new balloon made at ``minCPUs`` before it inflates, which idle CPUs are
shared, the memory nodes a container keeps.
"""

from __future__ import annotations

from typing import Any

from nri_resmgr.model import ContainerID, QoSClass
from nri_resmgr.policy.balloons.config import CPUPriority
from nri_resmgr.topology.cpuset import IDSet
from tests.unit.resmgr.balloons.support import bctr, policy, run


def _hp(priority: CPUPriority) -> dict[str, Any]:
    return {
        "reservedResources": {"cpu": "2"},
        "balloonTypes": [
            {"name": "hp", "minBalloons": 1, "minCPUs": 2, "allocatorPriority": priority.value}
        ],
    }


def test_initial_balloons_are_made_high_priority_first() -> None:
    # setConfig makes the minBalloons balloons by allocatorPriority: hp (high) takes
    # the CPUs the reserved balloon (low) takes when it goes first, that is when hp
    # has no priority (none: last)
    first = policy(_hp(CPUPriority.NONE)).initial_state().balloons["reserved[0]"].cpus
    st = policy(_hp(CPUPriority.HIGH)).initial_state()
    assert st.balloons["hp[0]"].cpus == first
    assert not st.balloons["reserved[0]"].cpus & first
    assert list(st.balloons) == ["hp[0]", "reserved[0]", "default[0]"]


def test_ties_go_to_the_balloon_made_first_not_the_lowest_instance() -> None:
    # t[0] goes with its container and is made again after t[1]: nri-plugins appends
    # it to its list of balloons, and a tie (as free, as many containers) goes to t[1]
    cfg = {"balloonTypes": [{"name": "t", "maxCPUs": 1, "namespaces": ["*"]}]}
    p = policy(cfg)
    st = run(p, bctr("a", pod="p1", milli=1000), bctr("b", pod="p2", milli=1000))
    st = p.release(st, ContainerID("p1-a")).state
    st = p.allocate(st, bctr("c", pod="p3", milli=1000)).state
    assert st.members[ContainerID("p3-c")].balloon == "t[0]"
    d = p.allocate(st, bctr("g", pod="p4", qos=QoSClass.BEST_EFFORT))
    assert d.state.members[ContainerID("p4-g")].balloon == "t[1]"


def test_a_new_balloon_is_made_at_min_cpus_then_inflated() -> None:
    # node 0 is CPUs 0-3 and their siblings 16-19; the reserved balloon has CPU 0.  The
    # new balloon's first CPU (minCPUs 1) is 16, the free thread of a used core; the
    # inflation adds three near it.  Sized for 3500m at once it would take the whole
    # free cores 1 and 2 (1-2,17-18) and leave 16 idle
    cfg = {
        "reservedResources": {"cpu": "1"},
        "balloonTypes": [{"name": "t", "minCPUs": 1, "namespaces": ["*"]}],
    }
    p = policy(cfg)
    st = p.initial_state()
    assert st.balloons["reserved[0]"].cpus == IDSet([0])
    d = p.allocate(st, bctr("a", milli=3500))
    assert d.state.balloons["t[0]"].cpus == IDSet([1, 2, 16, 17])
