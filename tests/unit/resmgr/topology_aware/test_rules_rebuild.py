"""nri-plugins' supply rules read back from a runtime's reports (the topology-aware
policy's rebuild on `small()`): an exclusive container without a cpuset placed as new,
only the shared-like claims another report overlaps retried, a shown CPU preferred to its
hidden sibling, unpinned reports holding no CPUs, and the views a mixed, fallen-back or
hidden-thread container's report gives.
"""

from __future__ import annotations

import pytest

from nri_resmgr.model import (
    CPUKind,
)
from nri_resmgr.policy.topology_aware import TopologyAwarePolicy
from nri_resmgr.policy.topology_aware.preferences import (
    CPU_PRESERVE,
    HIDE_HYPERTHREADS,
    PREFER_ISOLATED,
    PREFER_SHARED,
)
from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.synthetic import build_topology
from tests.support.builders import BU, ctr, small, with_current
from tests.support.topology_aware import Node, guaranteed


def test_rebuild_places_an_exclusive_container_without_a_cpuset_as_new() -> None:
    """With fallbackToShared, a container reporting no CPUs (created while the daemon was
    down) did not fall back: it is placed as new, exclusive, and the next rebuild keeps it
    (a Hypothesis example of the restart properties on 1s2d-l3-isolated: taken as fallen
    back, it went shared on an L3 group's two shared CPUs, a claim of their size, and the
    next rebuild moved the root's shared containers)."""
    t = build_topology(
        {"packages": 1, "dies": 2, "nodes": 1, "cores": 4, "threads": 2, "l3_per_die": 2,
         "isolated": "3,7,11,15", "memory": "2G"}
    )  # fmt: skip
    p = TopologyAwarePolicy(topology=t, config={"fallbackToShared": True})
    cs = [
        ctr("c0", pod="c0", milli=0, cur="5,13", cur_mems="1", cid="c0"),
        ctr("c1", pod="c1", milli=2000, cur="", cid="c1"),
        ctr("c2", pod="c2", milli=2000, cur="1,9", cur_mems="0", cid="c2"),
        ctr("c3", pod="c3", qos=BU, milli=0, cur="2,5-6,10,13-14", cur_mems="0-1", cid="c3"),
    ]
    d = p.rebuild(cs)
    p.check(d.state)
    r = p.render(d.state)
    assert r[cs[1].id].kind is CPUKind.EXCLUSIVE and len(r[cs[1].id].cpus) == 2
    again = p.rebuild([with_current(c, r[c.id].cpus, r[c.id].mems) for c in cs])
    assert again.updates == (), again.reason


def test_rebuild_retries_only_the_shared_like_claims_another_report_overlaps() -> None:
    """A Hypothesis example of the restart properties (1s2d-l3-isolated, fallbackToShared,
    2 CPUs reserved): new1, created while the daemon was down, reported every CPU and fell
    back to shared on L3 group 1's CPUs 2,10; new0 got L3 group 0's 1,9 exclusively.
    Both reports are exactly an L3 group's shared set, but only 2,10 is also in another
    container's report (new2's): the retry leaves new1 shared and keeps new0 exclusive,
    where leaving both shared moved new2 onto 1,9."""
    t = build_topology(
        {"packages": 1, "dies": 2, "nodes": 1, "cores": 4, "threads": 2, "l3_per_die": 2,
         "isolated": "3,7,11,15", "memory": "2G"}
    )  # fmt: skip
    p = TopologyAwarePolicy(
        topology=t, config={"fallbackToShared": True, "reservedResources": {"cpu": "2"}}
    )
    cs = [
        ctr("new1", pod="new1", milli=2000, cur="2,10", cur_mems="0", cid="new1"),
        ctr("new2", pod="new2", qos=BU, milli=1000, cur="2,5-6,10,13-14", cur_mems="0-1",
            cid="new2"),
        ctr("c0", pod="c0", milli=2000, cur="4,12", cur_mems="1", cid="c0"),
        ctr("c1", pod="c1", milli=0, cur="6,14", cur_mems="1", cid="c1"),
        ctr("new0", pod="new0", milli=2000, cur="1,9", cur_mems="0", cid="new0"),
    ]  # fmt: skip
    d = p.rebuild(cs)
    p.check(d.state)
    assert d.updates == (), d.reason
    kinds = {cid: g.kind for cid, g in d.state.grants.items()}
    assert (kinds[cs[0].id], kinds[cs[4].id]) == (CPUKind.SHARED, CPUKind.EXCLUSIVE)


def test_rebuild_keeps_a_shared_containers_pool_from_a_mixed_one_placed_before_it() -> None:
    """A Hypothesis example (n4c16): c1 (0m) shares node2; c2, mixed with hide-hyperthreads,
    holds cores 4,12 and 6,14 of package1.  Rebuild places mixed containers before shared
    ones: without c1's stand-in in node2, c2 took node2's last core and c1 moved."""
    ann = {HIDE_HYPERTHREADS: "true", PREFER_ISOLATED: "true", PREFER_SHARED: "false"}
    n = Node()
    n.create(
        guaranteed("c0", 0), guaranteed("c1", 0), ctr("c2", pod="c2", milli=2500, ann=ann, cid="c2")
    )
    assert (n.a("c1").pool, n.a("c2").kind) == ("node2", CPUKind.MIXED)
    n.rebuilt_moves_nobody()


def test_rebuild_prefers_a_shown_cpu_to_its_hidden_sibling() -> None:
    """A mixed hide-hyperthreads container whose isolated CPU is the higher thread of
    its core (9 of core 1,9: CPU 1 is also free) reports that thread, so the rebuild
    takes it, not the lower sibling, which would show instead (a Hypothesis example of
    the preference properties on hybrid-isolated: the rebuild moved c0 to 1-3,8)."""
    t = build_topology(
        {"packages": 1, "nodes": 2, "cores": 4, "threads": 2, "memory": "2G",
         "efficient_cpus": "2-3,6-7,10-11,14-15", "isolated": "1,9"}
    )  # fmt: skip
    p = TopologyAwarePolicy(topology=t, config={})
    ann = {PREFER_ISOLATED: "true", HIDE_HYPERTHREADS: "true"}
    cs = [
        ctr("c0", pod="c0", milli=1500, ann=ann, cur="2-3,8-9", cur_mems="0", cid="c0"),
        ctr("c1", pod="c1", milli=0, cur="4-7,12-15", cur_mems="1", cid="c1"),
    ]
    d = p.rebuild(cs)
    p.check(d.state)
    assert d.updates == (), d.reason
    assert d.state.grants[cs[0].id].exclusive == IDSet([9])


def test_rebuild_counts_no_cpus_held_by_an_unpinned_report() -> None:
    """A cpu.preserve container is never pinned, so its report (here every CPU) tells
    nothing about whose CPUs are whose: the mixed container m still takes back the CPU
    the other shared views lack (7), not one the cpu.preserve report "shares" (a
    Hypothesis example of the restart properties on 2s2n2c2t: the second rebuild gave
    m CPU 5 and moved the shared containers)."""
    p = TopologyAwarePolicy(topology=small(), config={"reservedResources": {"cpu": "2"}})
    keep = {CPU_PRESERVE: "true"}
    cs = [
        ctr("m", pod="m", milli=1500, cur="1-7,9-15", cur_mems="0-3", cid="m"),
        ctr("s", pod="s", qos=BU, milli=0, cur="6,14-15", cur_mems="3", cid="s"),
        ctr("k", pod="k", milli=1000, ann=keep, cur="0-15", cur_mems="0-3", cid="k"),
    ]
    d = p.rebuild(cs)
    p.check(d.state)
    assert d.updates == (), d.reason
    assert d.state.grants[cs[0].id].exclusive == IDSet([7])


def test_rebuild_retry_ignores_an_unpinned_report() -> None:
    """With fallbackToShared, x (3 CPUs) fell back to package0's shared set 1,9,11 next
    to c2's hide-hyperthreads grant 2-3,10 (shown: 2-3).  Both claims are exactly a
    shared set; only x's is overlapped by other pinned reports (s, t), so only x is
    retried as shared.  The cpu.preserve container k on every CPU is not pinned and
    overlaps nothing: counted, it marked c2 too, the retry then moved c2 and lost, and
    s and t were moved off x's CPUs (a Hypothesis example of the restart properties on
    2s2n2c2t, 2 CPUs reserved: 0,8)."""
    config = {"fallbackToShared": True, "reservedResources": {"cpu": "2"}}
    p = TopologyAwarePolicy(topology=small(), config=config)
    hide = {HIDE_HYPERTHREADS: "true", PREFER_ISOLATED: "true"}
    keep = {CPU_PRESERVE: "true", PREFER_ISOLATED: "true"}
    cs = [
        ctr("c2", pod="c2", milli=3000, ann=hide, cur="2-3", cur_mems="1", cid="c2"),
        ctr("x", pod="x", milli=3000, cur="1,9,11", cur_mems="0-1", cid="x"),
        ctr("s", pod="s", milli=0, cur="1,9", cur_mems="0", cid="s"),
        ctr("t", pod="t", milli=0, cur="11", cur_mems="1", cid="t"),
        ctr("k", pod="k", milli=0, ann=keep, cur="0-15", cur_mems="0-3", cid="k"),
    ]
    d = p.rebuild(cs)
    p.check(d.state)
    assert d.updates == (), d.reason
    assert d.state.grants[cs[1].id].kind is CPUKind.SHARED


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_rebuild_reads_a_fallen_back_view_next_to_a_mixed_container(
    order: tuple[int, int],
) -> None:
    """With fallbackToShared, h (4 CPUs, hide-hyperthreads) runs shared in package1 next
    to the mixed m, which holds CPU 4 of node2: h shows one thread on each core of
    package1's shared set, 5-7,12 (12, not 4, on core 4/12).  That is also a valid
    4-CPU claim; kept, it took m's shared CPUs and moved m.  The rebuild reads it as the
    shared view it is when m's report may hold the CPUs the view lacks (a Hypothesis
    example of the restart properties on two-socket, 2 CPUs reserved: the second
    Synchronize moved the mixed and a shared container)."""
    config = {"fallbackToShared": True, "reservedResources": {"cpu": "2"}}
    p = TopologyAwarePolicy(topology=small(), config=config)
    hide = {HIDE_HYPERTHREADS: "true", PREFER_ISOLATED: "true"}
    cs = [
        ctr("m", pod="m", milli=1500, cur="4-5,12-13", cur_mems="2", cid="m"),
        ctr("h", pod="h", milli=4000, ann=hide, cur="5-7,12", cur_mems="2-3", cid="h"),
    ]
    d = p.rebuild([cs[i] for i in order])
    p.check(d.state)
    assert d.updates == (), d.reason
    assert d.state.grants[cs[1].id].kind is CPUKind.SHARED
    assert d.state.grants[cs[0].id].exclusive == IDSet([4])


def test_rebuild_hides_the_thread_a_shared_view_lacks() -> None:
    """h (4 CPUs, hide-hyperthreads) holds 1,3,6,9 (cores 0/6, 1/7, 3/9; CPU 0 is
    reserved) and shows 1,3,6.  Its hidden thread is 7 or 9; s's view of node1 lacks 9
    (and 3), so 9 is somebody's exclusive CPU, while 7 is in no view at all.  The claim
    took 7 (the lower id) and handed 9 to s's shared set, moving s (a Hypothesis example
    of test_rebuild_from_arbitrary_cpusets_is_valid on pmem-hbm)."""
    t = build_topology({"packages": 1, "nodes": 2, "cores": 3, "threads": 2, "memory": "2G"})
    p = TopologyAwarePolicy(topology=t, config={})
    hide = {HIDE_HYPERTHREADS: "true"}
    cs = [
        ctr("h", pod="h", milli=4000, ann=hide, cur="1,3,6", cur_mems="0-1", cid="h"),
        ctr("s", pod="s", milli=0, cur="4-5,10-11", cur_mems="1", cid="s"),
    ]
    d = p.rebuild(cs)
    p.check(d.state)
    assert d.updates == (), d.reason
    assert d.state.grants[cs[0].id].exclusive == IDSet([1, 3, 6, 9])


def test_rebuild_reads_no_mixed_cpus_from_a_fail_open_mixed_report() -> None:
    """m, mixed, was created while the daemon was down and reports every CPU.  A mixed
    container's own CPUs are in no other pinned report, so m's report tells nothing
    about them here; read as "any CPU may be m's own", it made every claim look like a
    fallen-back shared view, and the retry moved c1 (mixed, own CPU 4, sharing 12)
    instead of m alone (found by comparing rebuilds with and without that reading)."""
    config = {"fallbackToShared": True, "reservedResources": {"cpu": "2"}}
    p = TopologyAwarePolicy(topology=small(), config=config)
    hide = {HIDE_HYPERTHREADS: "true"}
    cs = [
        ctr("m", pod="m", milli=1500, cur="0-15", cid="m"),
        ctr("c3", pod="c3", milli=2000, cur="5,13", cur_mems="2", cid="c3"),
        ctr("c1", pod="c1", milli=1500, cur="4,12", cur_mems="2", cid="c1"),
        ctr("c0", pod="c0", milli=4000, ann=hide, cur="2-3", cur_mems="1", cid="c0"),
        ctr("c2", pod="c2", milli=4000, cur="6-7,14-15", cur_mems="3", cid="c2"),
        ctr("c5", pod="c5", milli=2000, ann=hide, cur="1", cur_mems="0", cid="c5"),
    ]
    d = p.rebuild(cs)
    p.check(d.state)
    assert [u.container_id for u in d.updates] == [cs[0].id], d.reason


def test_rebuild_reads_the_threads_a_hidden_view_holds() -> None:
    """With fallbackToShared, x (4 CPUs, hide-hyperthreads) fell back to node1's shared
    set 2-3,10-11 and shows 2-3; the mixed m runs on CPU 1 and the root's shared set.
    10 and 11 are x's, hidden behind its view: m's own CPU is not one of them (the
    allocator's sibling preference took 10, then x no longer fit node1 and moved; a
    Hypothesis example of the restart properties on 2s2n2c2t, 2 CPUs reserved)."""
    config = {"fallbackToShared": True, "reservedResources": {"cpu": "2"}}
    p = TopologyAwarePolicy(topology=small(), config=config)
    hide = {HIDE_HYPERTHREADS: "true", PREFER_ISOLATED: "true"}
    cs = [
        ctr("m", pod="m", milli=1500, cur="1-7,9-15", cur_mems="0-3", cid="m"),
        ctr("x", pod="x", milli=4000, ann=hide, cur="2-3", cur_mems="1", cid="x"),
    ]
    d = p.rebuild(cs)
    p.check(d.state)
    assert d.updates == (), d.reason
    assert d.state.grants[cs[0].id].exclusive == IDSet([1])
