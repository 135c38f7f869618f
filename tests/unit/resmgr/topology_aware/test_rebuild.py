"""The topology-aware policy's rebuild from the containers a runtime reports: valid
placements kept without updates, fallback containers kept shared, overlapping, stale and
wrong-kind ones moved.  The machine is `small()` (tests.support.builders).
"""

from __future__ import annotations

from nri_resmgr.model import (
    CPUKind,
)
from nri_resmgr.policy.topology_aware import (
    TopologyAwarePolicy,
    TopologyAwareState,
)
from nri_resmgr.topology.synthetic import build_topology
from tests.support.builders import BE, BU, ctr, small, with_current


def test_rebuild_keeps_valid_placements_without_updates() -> None:
    p = TopologyAwarePolicy(topology=small(), config={})
    s = p.initial_state()
    cs = [
        ctr("s", pod="s", qos=BU, milli=200),
        ctr("x", pod="x", milli=2000),
        ctr("k", pod="k", ns="kube-system", qos=BE),
        ctr("m", pod="m", milli=1500),
    ]
    for c in cs:
        s = p.allocate(s, c).state
    r = p.render(s)
    d = p.rebuild([with_current(c, r[c.id].cpus, r[c.id].mems) for c in cs])
    assert d.updates == ()
    assert d.state == s


def test_rebuild_keeps_a_fallback_container_shared_when_a_shared_one_reports_its_cpus() -> None:
    """A Hypothesis example (1s1n4c2t, fallbackToShared): rebuilding moved a shared one.

    CPU 0 is reserved; x takes 1-3,5-7 exclusively, which leaves CPU 4 shared for s, so f
    falls back to shared on 4, next to s.  f's cpuset {4} has the size of its request, so it
    is a valid claim on its own, and the smaller one: kept first, it made x's claim
    empty the shared CPUs, x went shared on 1-3,5-7 and s moved there with it.  s
    reports CPU 4 too: the claim nobody else reports is the one to keep first.
    """
    t = build_topology({"packages": 1, "nodes": 1, "cores": 4, "threads": 2, "memory": "4G"})
    p = TopologyAwarePolicy(topology=t, config={"fallbackToShared": True})
    s = p.initial_state()
    cs = [ctr("x", pod="x", milli=6000), ctr("f", pod="f", milli=1000), ctr("s", pod="s")]
    for c in (cs[0], cs[2], cs[1]):  # s first: with nobody sharing, f would take CPU 4
        s = p.allocate(s, c).state
    r = p.render(s)
    assert [(str(r[c.id].cpus), r[c.id].kind) for c in cs] == [
        ("1-3,5-7", CPUKind.EXCLUSIVE),
        ("4", CPUKind.SHARED),
        ("4", CPUKind.SHARED),
    ]
    d = p.rebuild([with_current(c, r[c.id].cpus, r[c.id].mems) for c in cs])
    p.check(d.state)
    assert d.updates == (), d.reason
    assert d.state == s


def test_rebuild_keeps_fallback_containers_shared_when_they_are_pools_shared_sets() -> None:
    """Siblings of the example above on two nodes, found with a targeted generator.

    1 package x 2 nodes x 3 cores (node0 = 0-2, node1 = 3-5), CPU 0 reserved: s and t
    share node1 and node0, so x takes 1,3-4 in the root; f falls back to node0's shared
    CPU 2, next to t, and g to node1's shared CPU 5, next to s.  Were f's {2} kept
    first (the smaller claim), x's claim would empty node0's shared CPUs, and x and s
    would move.  {2} is node0's sharable CPUs minus x's claim: a shared set, kept after
    the claims that are not, and the last CPU of t's cpuset, which no claim may take.
    """
    t = build_topology({"packages": 1, "nodes": 2, "cores": 3, "threads": 1, "memory": "2G"})
    p = TopologyAwarePolicy(topology=t, config={"fallbackToShared": True})
    cs = [
        ctr("s", pod="s"),
        ctr("t", pod="t"),
        ctr("x", pod="x", milli=3000),
        ctr("f", pod="f", milli=1000),
        ctr("g", pod="g", milli=1000),
    ]
    for n in (4, 5):  # without g, then with it
        s = p.initial_state()
        for c in cs[:n]:
            s = p.allocate(s, c).state
        r = p.render(s)
        assert [(str(r[c.id].cpus), r[c.id].kind) for c in cs[:n]] == [
            ("5", CPUKind.SHARED),
            ("2", CPUKind.SHARED),
            ("1,3-4", CPUKind.EXCLUSIVE),
            ("2", CPUKind.SHARED),
            ("5", CPUKind.SHARED),
        ][:n]
        d = p.rebuild([with_current(c, r[c.id].cpus, r[c.id].mems) for c in cs[:n]])
        p.check(d.state)
        assert d.updates == (), d.reason
        assert d.state == s


def test_rebuild_moves_overlapping_stale_and_wrong_kind() -> None:
    p = TopologyAwarePolicy(topology=small(), config={})
    cs = [
        ctr("a", pod="a", milli=2000, cur="4,12", cur_mems="2"),
        ctr("b", pod="b", milli=2000, cur="4,12", cur_mems="2"),  # same CPUs as a
        ctr("c", pod="c", milli=2000, cur="0,8", cur_mems="0"),  # includes reserved CPU 0
        ctr("d", pod="d", qos=BE, cur="6,14", cur_mems="3"),  # shared now, not exclusive
    ]
    d = p.rebuild(cs)
    p.check(d.state)
    assert isinstance(d.state, TopologyAwareState)
    # a and b both claim 4,12: neither holds them alone, so both are placed afresh
    grants = {c.name: d.state.grants[c.id] for c in cs}
    assert grants["a"].exclusive.isdisjoint(grants["b"].exclusive)
    assert 0 not in grants["c"].exclusive | grants["b"].exclusive
    assert grants["d"].kind is CPUKind.SHARED
    moved = {u.container_id for u in d.updates}
    assert {cs[2].id, cs[3].id} <= moved and len(moved & {cs[0].id, cs[1].id}) >= 1


def test_a_container_reporting_no_cpus_is_rebuilt_where_a_creation_places_it() -> None:
    """A container created while the daemon was down (every one at a cold start) reports
    no cpuset: the rebuild prefers none of its CPUs (`Rebuilder._preferred`) and grants
    what a creation in the same order would, exclusive CPUs included."""
    p = TopologyAwarePolicy(topology=small(), config={})
    cs = [ctr("x", pod="x", milli=2000), ctr("y", pod="y", milli=1000),
          ctr("s", pod="s", qos=BU, milli=200)]  # fmt: skip
    s = p.initial_state()
    for c in cs:
        s = p.allocate(s, c).state
    d = p.rebuild(cs)
    assert d.state == s
    assert {cid: a.cpus for cid, a in p.render(d.state).items()} == {
        cid: a.cpus for cid, a in p.render(s).items()
    }
