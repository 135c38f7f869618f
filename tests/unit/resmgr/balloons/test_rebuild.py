"""Regressions of the balloons rebuild, one per root cause of a rebuild that moved
containers the second time (`test_props.test_rebuild_from_any_reported_cpusets_settles`).

Each test rebuilds from reported cpusets, checks where the balloons are, and checks the
fixed point: a rebuild from the first one's rendering moves nothing.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from nri_resmgr.model import ContainerInfo, Decision
from nri_resmgr.policy.balloons import BALLOON_ANNOTATION, BalloonsPolicy, BalloonsState
from nri_resmgr.topology.cpuset import IDSet
from tests.support.balloons import bctr, policy, run
from tests.unit.resmgr.balloons.test_props import CONFIGS

#: the reserved CPUs given as a cpuset; the default type shares every idle CPU
GIVEN: dict[str, Any] = {
    "reservedResources": {"cpu": "cpuset:0,16"},
    "balloonTypes": [{"name": "default", "shareIdleCPUsInSame": "system", "minCPUs": 1}],
}

#: hyperthreads hidden by a type, the default type sharing idle CPUs per NUMA node
HIDDEN: dict[str, Any] = {
    "reservedResources": {"cpu": "1"},
    "balloonTypes": [
        {"name": "full", "hideHyperthreads": True, "minCPUs": 2, "namespaces": ["full"]},
        {"name": "grp", "groupBy": "${pod/labels/app}", "shareIdleCPUsInSame": "numa"},
        {"name": "default", "shareIdleCPUsInSame": "numa", "namespaces": ["other"]},
    ],
}


def _settled(p: BalloonsPolicy, reported: list[ContainerInfo]) -> BalloonsState:
    """The first rebuild's state, after checking that a second one moves nothing."""
    first: Decision[BalloonsState] = p.rebuild(reported)
    p.check(first.state)
    rendered = p.render(first.state)
    again = [
        replace(c, current_cpus=rendered[c.id].cpus, current_mems=rendered[c.id].mems)
        for c in reported
    ]
    second = p.rebuild(again)
    assert second.updates == (), [str(u.container_id) for u in second.updates]
    return first.state


def _cpus(st: BalloonsState) -> dict[str, str]:
    return {name: str(b.cpus) for name, b in st.balloons.items()}


def test_an_unreadable_annotation_is_the_default_type_for_claim_and_placement() -> None:
    """An unknown balloon type: the claim put it in default, placing it as new raised."""
    p = policy(GIVEN)
    odd = bctr("odd", pod="odd", ann={BALLOON_ANNOTATION: "nosuch"}, milli=1000)
    on_nothing = bctr("none", pod="none", ann={BALLOON_ANNOTATION: "nosuch"})
    st = _settled(p, [replace(odd, current_cpus=IDSet.parse("5")), on_nothing])
    for c in (odd, on_nothing):
        assert st.balloons[st.members[c.id].balloon].type == "default"
    d = p.rebuild([on_nothing])
    assert "unreadable, in the default balloon" in d.reason
    assert "not placed" not in d.reason


def test_no_claim_takes_the_reserved_cpus() -> None:
    """A default container reported on a reserved CPU used to claim it; the reserved
    balloon went elsewhere, and came back to its CPUs the next time."""
    p = policy(GIVEN)
    c = bctr("c", pod="c", cur="0,12,13,14,28")
    st = _settled(p, [c])
    assert _cpus(st)["reserved[0]"] == "0,16"
    assert 0 not in st.balloons[st.members[c.id].balloon].cpus


def test_the_reserved_balloon_taken_over_keeps_its_cpus_first() -> None:
    """A kube-system container reported elsewhere joins the reserved balloon on its
    CPUs; the reserved balloon does not move to where the container was."""
    p = policy(GIVEN)
    k = bctr("k", pod="k", ns="kube-system", cur="5,6")
    st = _settled(p, [k])
    assert st.members[k.id].balloon == "reserved[0]"
    assert _cpus(st)["reserved[0]"] == "0,16"


def test_an_inflated_reserved_balloon_is_taken_over_by_its_containers() -> None:
    """The reserved balloon is made first on its CPUs; its containers' claim keeps those
    and the ones it inflated to (placed as new, it inflated elsewhere)."""
    p = policy(CONFIGS[1])
    gone = [bctr("d", pod="d", milli=2500), bctr("f", pod="f", ns="full", milli=1000)]
    st = run(p, *gone)
    for c in gone[::-1]:
        st = p.release(st, c.id).state
    k = bctr("k", pod="k", ns="kube-system", milli=2500)
    st = p.allocate(st, k).state
    live = [k]
    rendered = p.render(st)
    reported = [
        replace(c, current_cpus=rendered[c.id].cpus, current_mems=rendered[c.id].mems) for c in live
    ]
    assert p.rebuild(reported).updates == ()
    got = _settled(p, reported)
    assert got.balloons["reserved[0]"].cpus == st.balloons["reserved[0]"].cpus
    assert len(got.balloons["reserved[0]"].cpus) == 3


def test_a_shared_idle_claim_covers_the_domains_it_is_seen_on() -> None:
    """A grp balloon on CPUs of nodes 0 and 1 sees the idle CPUs of both; claiming its
    rendering used to keep 2 CPUs of one core, seeing node 0 only."""
    p = policy(HIDDEN)
    c = bctr("g", pod="g", milli=1500, labels={"app": "a"}, cur="1,4")
    st = _settled(p, [c])
    mine = st.balloons[st.members[c.id].balloon].cpus
    assert p.topology.nodes_of(mine) == IDSet([0, 1])


def test_a_claim_counts_only_other_groups_as_holders() -> None:
    """A hidden sibling reported by another group is not one to take while others are
    free: 18 (the sibling of 2) is an idle CPU the default balloon of node 0 shares."""
    p = policy(HIDDEN)
    full = bctr("f", pod="f", ns="full", milli=7000, cur="1-4")
    idle = bctr("d", pod="d", ns="other", cur="16,18")
    st = _settled(p, [full, idle])
    assert str(st.balloons[st.members[full.id].balloon].cpus) == "1-4,17,19-20"
    assert str(st.balloons[st.members[idle.id].balloon].cpus) == "16"


def test_hidden_siblings_are_taken_where_shared_idle_views_show_them_held() -> None:
    """A full balloon on 1,9 and the sibling 25 (shows 1,9); the default balloon of node
    2 shares its idle CPUs, not 9 or 25: 25 is the one held, not 17."""
    p = policy(HIDDEN)
    full = bctr("f", pod="f", ns="full", milli=2500, cur="1,9")
    idle = bctr("d", pod="d", ns="other", cur="8,10-11,24,26-27")
    st = _settled(p, [full, idle])
    assert str(st.balloons[st.members[full.id].balloon].cpus) == "1,9,25"
