"""The balloons policy takes its steps in nri-plugins' order, so it picks the same CPUs.

Each test shows one case where doing a step at another time (or at once) picks other
CPUs than nri-plugins' balloons plugin v0.14.0 does: the order the initial balloons are
made in, a new balloon made at ``minCPUs`` before it inflates, which idle CPUs are
shared, the memory nodes a container keeps.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from nri_resmgr.model import ContainerID, QoSClass
from nri_resmgr.policy.balloons.spec import CPUPriority
from nri_resmgr.topology.cpuset import IDSet
from tests.support.balloons import bctr, policy, run
from tests.support.builders import topo


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


def test_isolated_cpus_are_never_shared_idle_cpus() -> None:
    # node 0 is CPUs 0-3,16-19; 2 and 18 are kernel-isolated: idle, in the node, yet
    # never shared (nri-plugins' shareIdleCpus takes them out)
    machine = topo(packages=2, nodes=2, cores=4, threads=2, memory="2G", isolated="2,18")
    cfg = {
        "reservedResources": {"cpu": "cpuset:31"},
        "balloonTypes": [
            {"name": "s", "shareIdleCPUsInSame": "numa", "minCPUs": 2, "namespaces": ["*"]}
        ],
    }
    p = policy(cfg, machine)
    d = p.allocate(p.initial_state(), bctr("a", milli=100))
    assert d.state.balloons["s[0]"].cpus == IDSet([0, 16])
    assert d.assignment is not None
    assert d.assignment.cpus == IDSet([0, 1, 3, 16, 17, 19])


_SHARE_AND_MIN: dict[str, Any] = {
    "reservedResources": {"cpu": "cpuset:31"},
    "balloonTypes": [
        {"name": "s", "shareIdleCPUsInSame": "numa", "namespaces": ["s"]},
        {"name": "t", "minCPUs": 2, "namespaces": ["t"]},
    ],
}


def test_cpus_of_a_deleted_balloon_are_shared_at_the_next_inflation() -> None:
    # t[0] (3 CPUs, minCPUs 2) and s[0] share node 3 (12-15,28-31; 31 is reserved).
    # When t[0]'s container goes it deflates to 2 CPUs, the one it gives back shared
    # at once, and is deleted: its last 2 CPUs are idle but shared only when a
    # balloon next inflates
    p = policy(_SHARE_AND_MIN)
    node3 = p.topology.node_cpus(3) - IDSet([31])
    st = run(p, bctr("a", pod="pt", ns="t", milli=3000), bctr("b", pod="ps", ns="s", milli=1000))
    gone = st.balloons["t[0]"].cpus
    assert gone <= node3 and st.balloons["s[0]"].cpus <= node3
    r = p.release(st, ContainerID("pt-a"))
    (view,) = (u.cpus for u in r.updates if u.container_id == ContainerID("ps-b"))
    waiting = node3 - view
    assert len(waiting) == 2 and waiting <= gone
    assert not waiting & r.state.used
    d = p.allocate(r.state, bctr("c", pod="ps2", ns="s", milli=1000))
    assert d.assignment is not None and d.assignment.cpus == node3


def test_a_balloon_keeps_sharing_idle_cpus_of_a_domain_it_left() -> None:
    # s[0] grows out of node 3 onto node 2 and shares node 2's idle CPUs; when it
    # deflates back into node 3 it keeps sharing them (nri-plugins takes a shared CPU
    # back only when a balloon takes the CPU), but not the node 2 CPUs it gave back
    p = policy(_SHARE_AND_MIN)
    st = run(p, bctr("a", pod="p1", ns="s", milli=5000), bctr("b", pod="p2", ns="s", milli=3000))
    before = st.balloons["s[0]"]
    node2 = p.topology.node_cpus(2)
    assert p.topology.nodes_of(before.cpus) == IDSet([2, 3])
    r = p.release(st, ContainerID("p2-b"))
    after = r.state.balloons["s[0]"]
    assert p.topology.nodes_of(after.cpus) == IDSet([3])
    assert after.shared & node2 == before.shared & node2 != IDSet()
    assert not after.shared & (before.cpus - after.cpus)


def test_a_containers_memory_nodes_only_widen() -> None:
    # nodes 0-1 and 2-3 are pairs (distance 11), the pairs 21 apart.  t[0] grows from
    # node 0 onto node 1: a's zone takes node 1 and, as libmem's Realloc expands a zone,
    # the nearest DRAM nodes beyond it (2 and 3); b joins with the balloon's nodes.
    # When the balloon deflates back into one node a keeps its zone
    p = policy(
        {"reservedResources": {"cpu": "1"}, "balloonTypes": [{"name": "t", "namespaces": ["*"]}]}
    )
    a, b = ContainerID("p1-a"), ContainerID("p2-b")
    st = run(p, bctr("a", pod="p1", milli=1000))
    assert p.render(st)[a].mems == IDSet([0])
    d = p.allocate(st, bctr("b", pod="p2", milli=7000))
    assert p.topology.nodes_of(d.state.balloons["t[0]"].cpus) == IDSet([0, 1])
    assert p.render(d.state)[a].mems == IDSet([0, 1, 2, 3])
    assert d.assignment is not None and d.assignment.mems == IDSet([0, 1])
    r = p.release(d.state, b)
    assert len(p.topology.nodes_of(r.state.balloons["t[0]"].cpus)) == 1
    assert p.render(r.state)[a].mems == IDSet([0, 1, 2, 3])


def test_a_rebuild_without_containers_is_the_initial_state() -> None:
    # the daemon starts with a rebuild (Synchronize): with no containers it must make
    # the initial balloons where and in the order nri-plugins' setConfig makes them,
    # though the rebuild makes the reserved balloon first
    cfg = {
        "reservedResources": {"cpu": "1500m"},
        "balloonTypes": [
            {"name": "t0", "minCPUs": 2, "minBalloons": 2, "allocatorPriority": "high"},
            {"name": "t1", "minCPUs": 1, "minBalloons": 1},
        ],
    }
    p = policy(cfg, topo(packages=2, nodes=2, cores=2, threads=2, memory="2G"))
    initial = p.initial_state().balloons
    rebuilt = p.rebuild([]).state.balloons
    assert (
        list(rebuilt) == list(initial) == ["t0[0]", "t0[1]", "reserved[0]", "default[0]", "t1[0]"]
    )
    assert {n: b.cpus for n, b in rebuilt.items()} == {n: b.cpus for n, b in initial.items()}


def test_kept_difference_a_balloon_never_takes_more_than_max_cpus_hold() -> None:
    # class maxcpus-honoured: 5 CPUs besides the reserved one; t[0] holds 3000m on 3 of
    # them, 2 are free.  1500m would need 5 CPUs in t[0] (maxCPUs 4): nri-plugins counts
    # t[0] as able to grow by all free CPUs when maxCPUs exceeds them, puts the container
    # there and clamps the balloon at 4 CPUs for 4500m; here it gets a new balloon
    cfg = {
        "availableResources": {"cpu": "cpuset:0-5"},
        "reservedResources": {"cpu": "1"},
        "balloonTypes": [{"name": "t", "maxCPUs": 4, "namespaces": ["*"]}],
    }
    p = policy(cfg)
    st = run(p, bctr("a", pod="p1", milli=3000), bctr("b", pod="p2", milli=1500))
    assert st.members[ContainerID("p2-b")].balloon == "t[1]"
    assert [len(st.balloons[n].cpus) for n in ("t[0]", "t[1]")] == [3, 2]


def test_a_rebuild_that_replays_to_the_same_placements_keeps_what_each_balloon_owns() -> None:
    # s[0] owns CPU 16 and shares node 0's other idle CPUs; its containers report the
    # whole node, which cannot tell the CPU it owns.  nri-plugins restarts by
    # allocating the containers again in order: where that puts everyone where they
    # report, the rebuild is that state, and s[0] still owns 16 (a claim took CPU 1)
    cfg = {
        "reservedResources": {"cpu": "1"},
        "balloonTypes": [{"name": "s", "shareIdleCPUsInSame": "numa", "namespaces": ["s"]}],
    }
    p = policy(cfg)
    cs = [bctr("b", pod="p1", ns="s", milli=500), bctr("c", pod="p2", ns="s", milli=500)]
    st = run(p, *cs)
    assert st.balloons["s[0]"].cpus == IDSet([16])
    r = p.render(st)
    d = p.rebuild([replace(c, current_cpus=r[c.id].cpus, current_mems=r[c.id].mems) for c in cs])
    assert d.updates == () and d.reason == "rebuilt: as created"
    assert d.state.balloons == st.balloons


def test_a_memory_type_with_no_node_near_takes_the_nearest_ones_farther_away() -> None:
    # the PMEM node 2 belongs to node 1 (distance 17) and is 19 from node 0: a container
    # asking for PMEM in a balloon on node 0 gets node 2, as libmem's findInitialZone
    # expands the balloon's nodes by the nearest nodes of the asked kind and keeps only
    # them (not node 0, which has no PMEM near it); a DRAM container stays on node 0
    m = topo(
        packages=1,
        nodes=2,
        cores=4,
        threads=2,
        memory="2G",
        extra_memory_nodes=[
            {"kind": "pmem", "memory": "8G", "attach": 1, "distances": {0: 19, 1: 17}}
        ],
    )
    p = policy(
        {"reservedResources": {"cpu": "1"}, "balloonTypes": [{"name": "t", "namespaces": ["*"]}]},
        m,
    )
    ann = {"memory-type.resource-policy.nri.io/container.a": "pmem"}
    st = run(p, bctr("a", pod="p1", milli=1000, ann=ann), bctr("b", pod="p1", milli=1000))
    assert m.nodes_of(st.balloons["t[0]"].cpus) == IDSet([0])
    shown = p.render(st)
    assert shown[ContainerID("p1-a")].mems == IDSet([2])
    assert shown[ContainerID("p1-b")].mems == IDSet([0])


def test_a_memory_type_takes_the_nearest_nodes_of_its_kind_from_every_node_of_the_balloon() -> None:
    # HBM node 3 belongs to node 1, HBM node 4 to node 2, each 30 from node 0.  A balloon
    # on nodes 0-1 asking HBM gets both: libmem's findInitialZone expands from node 0
    # first (3 and 4 at 30), then from node 1 (3 at 15); the nodes' own HBM alone is 3
    m = topo(
        packages=3,
        nodes=1,
        cores=2,
        threads=1,
        memory="2G",
        extra_memory_nodes=[
            {"kind": "hbm", "memory": "1G", "attach": 1, "distances": {0: 30, 1: 15, 2: 30}},
            {"kind": "hbm", "memory": "1G", "attach": 2, "distances": {0: 30, 1: 30, 2: 15}},
        ],
    )
    p = policy(
        {"reservedResources": {"cpu": "1"}, "balloonTypes": [{"name": "t", "namespaces": ["*"]}]},
        m,
    )
    ann = {"memory-type.resource-policy.nri.io/container.a": "hbm"}
    st = run(p, bctr("a", pod="p1", milli=3000, ann=ann))
    assert m.nodes_of(st.balloons["t[0]"].cpus) == IDSet([0, 1])
    assert p.render(st)[ContainerID("p1-a")].mems == IDSet([3, 4])
