"""nri-plugins' supply rules in the topology-aware policy: scenarios and properties.

The scenarios run on nri-plugins' n4c16 machine shape (`small()`: 2 packages x 2 NUMA
nodes x 2 cores x 2 threads, ``reservedResources.cpu: 750m``, so CPU 0 is reserved) and
name the test of their e2e suite (test/e2e/policies.test-suite/topology-aware/n4c16)
they mirror.  Their CPU numbering differs from ours (their node n is CPUs 4n..4n+3), so
the assertions are theirs in shape: counts, NUMA nodes, disjointness.

- **Shared-pool rule**: an exclusive grant may take a pool's last shared CPUs when no
  shared container lives there (nri-plugins ``AllocatableSharedCPU() >= 1000*cnt``, one
  milli kept back for 0m containers); shared containers are never left on an empty or
  exclusive set, and a later shared container goes where shared CPUs are left.
- **Fractional reserved**: ``750m`` is 750m of capacity on the reserved CPU (their
  open #632); a reserved request beyond it runs on the root pool's shared CPUs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nri_resmgr.model import (
    AllocationError,
    ContainerInfo,
    CPUKind,
    QoSClass,
)
from nri_resmgr.policy.topology_aware import TopologyAwarePolicy, TopologyAwareState
from nri_resmgr.policy.topology_aware.preferences import (
    CPU_PRESERVE,
    HIDE_HYPERTHREADS,
    PREFER_ISOLATED,
    PREFER_SHARED,
)
from nri_resmgr.topology.cpuset import CPUSet, IDSet, union
from nri_resmgr.topology.synthetic import build_topology
from tests.support.builders import ctr, small, with_current
from tests.support.topology_aware import Node, besteffort, guaranteed

BE = QoSClass.BEST_EFFORT
BU = QoSClass.BURSTABLE
GU = QoSClass.GUARANTEED


def burstable(name: str, milli: int, limit: int | None = None) -> ContainerInfo:
    """With a 200M memory limit every pool holds (without one the root would win first:
    nri-plugins ranks Burstable containers by memory before CPU)."""
    return ctr(name, pod=name, qos=BU, milli=milli, limit=limit, mem=200 << 20, cid=name)


def disjoint(*sets: CPUSet) -> bool:
    return sum(len(s) for s in sets) == len(union(sets))


# ---- the shared-pool rule: scenarios ------------------------------------------------------


def test_four_three_cpu_containers_one_per_numa_node() -> None:
    """n4c16/test02-shrink-and-grow-shared (pod2), and issue 14: refused before."""
    n = Node()
    n.create(*(guaranteed(f"c{i}", 3000, pod="pod2") for i in range(4)))
    assert all(len(n.cpus(f"c{i}")) == 3 and len(n.nodes(f"c{i}")) == 1 for i in range(4))
    assert disjoint(*(n.cpus(f"c{i}") for i in range(4)))
    assert set().union(*(n.nodes(f"c{i}") for i in range(4))) == {0, 1, 2, 3}
    n.rebuilt_moves_nobody()


def test_shrink_and_grow_shared() -> None:
    """n4c16/test02-shrink-and-grow-shared, all steps."""
    n = Node({"colocatePods": True})
    n.create(guaranteed("p0c0", 5000, pod="pod0"), guaranteed("p0c1", 5000, pod="pod0"))
    assert len(n.cpus("p0c0")) == len(n.cpus("p0c1")) == 5
    assert len(n.nodes("p0c0")) == len(n.nodes("p0c1")) == 2
    assert disjoint(n.cpus("p0c0"), n.cpus("p0c1"))
    n.create(besteffort("p1c0", pod="pod1"), besteffort("p1c1", pod="pod1"))
    be = n.cpus("p1c0") | n.cpus("p1c1")
    assert n.cpus("p1c0") and n.cpus("p1c1")
    assert disjoint(n.cpus("p0c0") | n.cpus("p0c1"), be)
    n.delete("p0c0", "p0c1")
    # squeeze the BestEffort containers to the minimum
    n.create(*(guaranteed(f"p2c{i}", 3000, pod="pod2") for i in range(4)))
    assert all(len(n.cpus(f"p2c{i}")) == 3 for i in range(4))
    assert disjoint(*(n.cpus(f"p2c{i}") for i in range(4)))
    # the last non-reserved CPU that can be taken from the shared pools
    n.create(guaranteed("p3c0", 1000, pod="pod3"))
    be = n.cpus("p1c0") | n.cpus("p1c1")
    exclusive = union(n.cpus(f"p2c{i}") for i in range(4)) | n.cpus("p3c0")
    assert be and disjoint(be, exclusive)
    n.rebuilt_moves_nobody()


def test_seven_cpus_next_to_five_in_one_package() -> None:
    """n4c16/test01-always-fits (pod4, pod5): a 7-CPU container fills package0."""
    n = Node({"colocatePods": True})
    n.create(guaranteed("pod4c0", 5000))
    assert len(n.cpus("pod4c0")) == 5 and n.cores("pod4c0") == 3 and len(n.nodes("pod4c0")) == 2
    n.create(guaranteed("pod5c0", 7000))
    assert len(n.cpus("pod5c0")) == 7 and n.cores("pod5c0") == 4
    packages = {n.topology.cpu(c).package_id for c in n.cpus("pod5c0")}
    assert len(packages) == 1
    assert disjoint(n.cpus("pod4c0"), n.cpus("pod5c0"))
    n.rebuilt_moves_nobody()


def test_a_two_cpu_node_gives_exclusive_cpus() -> None:
    """Issue 14: a node of one core (2 threads) had no exclusive CPUs to give."""
    t = build_topology({"packages": 1, "nodes": 3, "cores": 1, "threads": 2, "memory": "1G"})
    n = Node(topology=t)
    n.create(guaranteed("a", 2000), guaranteed("b", 2000))
    assert [n.a(x).pool for x in "ab"] == ["node1", "node2"]
    assert [len(n.nodes(x)) for x in "ab"] == [1, 1]
    # a shared container goes where shared CPUs are left: node0's CPU next to reserved 0
    n.create(besteffort("be"))
    assert (n.a("be").pool, n.nodes("be")) == ("node0", {0})
    n.rebuilt_moves_nobody()


def test_idle_shared_pools_are_sliced_empty() -> None:
    """n4c16/test16-idle-shared-pools."""
    n = Node()
    n.create(*(guaranteed(f"pod0c{i}", 4000, pod="pod0") for i in range(3)))
    pod0 = [f"pod0c{i}" for i in range(3)]
    assert all(len(n.cpus(c)) == 4 and len(n.nodes(c)) == 1 for c in pod0)
    assert disjoint(*(n.cpus(c) for c in pod0))
    # BestEffort and Burstable containers go to the only pool with free CPUs
    n.create(*(besteffort(f"pod1c{i}", pod="pod1") for i in range(4)))
    assert len({n.cpus(f"pod1c{i}") for i in range(4)}) == 1
    n.create(*(burstable(f"pod2c{i}", 100, 150) for i in range(4)))
    assert {n.cpus(f"pod2c{i}") for i in range(4)} == {n.cpus("pod1c0")}
    used = [n.nodes(c) for c in pod0] + [n.nodes("pod1c0")]
    assert sum(len(x) for x in used) == len(set().union(*used)) == 4
    n.rebuilt_moves_nobody()
    for name in list(n.live):
        n.delete(name)
    # the other way around: shared first, then a whole idle NUMA node is taken
    n.create(besteffort("pod3c0", pod="pod3"), besteffort("pod3c1", pod="pod3"))
    assert disjoint(n.cpus("pod3c0"), n.cpus("pod3c1"))
    n.create(guaranteed("pod4c0", 4000))
    assert len(n.cpus("pod4c0")) == 4 and len(n.nodes("pod4c0")) == 1
    assert disjoint(n.cpus("pod4c0"), n.cpus("pod3c0"), n.cpus("pod3c1"))
    assert not n.nodes("pod4c0") & (n.nodes("pod3c0") | n.nodes("pod3c1"))
    n.rebuilt_moves_nobody()


@pytest.mark.parametrize(
    "sharer",
    [
        pytest.param(lambda i: besteffort(f"s{i}", pod="pod0"), id="besteffort"),
        pytest.param(lambda i: burstable(f"s{i}", 1, 750), id="burstable-1m"),
        pytest.param(lambda i: burstable(f"s{i}", 250, 750), id="burstable-250m"),
    ],
)
def test_busy_shared_pools_are_not_sliced_empty(sharer: object) -> None:
    """n4c16/test15-busy-shared-pools: one shared container per NUMA node keeps them."""
    assert callable(sharer)
    n = Node()
    n.create(*(sharer(i) for i in range(4)))
    assert set().union(*(n.nodes(f"s{i}") for i in range(4))) == {0, 1, 2, 3}
    n.create(guaranteed("g", 4000))
    assert n.a("g").pool.startswith("package")
    assert disjoint(n.cpus("g"), *(n.cpus(f"s{i}") for i in range(4)))
    assert all(n.cpus(f"s{i}") for i in range(4))
    n.rebuilt_moves_nobody()


def test_a_shared_container_is_never_left_on_an_emptied_set() -> None:
    """The rule's other half: with a 0m container in node1, node1 keeps a CPU."""
    n = Node()
    n.create(besteffort("be"))
    where = n.a("be").pool
    node = n.policy.tree.by_name(where)
    n.create(guaranteed("g", 1000 * len(node.sharable)))
    assert n.cpus("be") and disjoint(n.cpus("be"), n.cpus("g"))
    assert n.a("g").pool != where


# ---- fractional reserved capacity ---------------------------------------------------------


def test_reserved_750m_is_750m() -> None:
    """nri-plugins #632 (open there): 750m reserved is not a whole CPU of capacity."""
    n = Node()
    n.create(ctr("a", pod="a", ns="kube-system", milli=500, cid="a"))
    assert (n.a("a").kind, str(n.cpus("a"))) == (CPUKind.RESERVED, "0")
    n.create(ctr("b", pod="b", ns="kube-system", milli=250, cid="b"))
    assert n.a("b").kind is CPUKind.RESERVED
    # 750m of 750m taken: the next runs on the machine's shared CPUs, as nri-plugins
    # does for a reserved request beyond the reserved capacity (test05 pod5)
    n.create(ctr("c", pod="c", ns="kube-system", milli=100, cid="c"))
    assert (n.a("c").kind, n.a("c").pool) == (CPUKind.SHARED, "root")
    assert n.last is not None and "reserved capacity exceeded" in n.last.reason
    assert "0m free of 750m reserved on 0" in n.last.reason
    # BestEffort kube-system containers (0m) still fit on the reserved CPU
    n.create(besteffort("k", ns="kube-system"))
    assert (n.a("k").kind, str(n.cpus("k"))) == (CPUKind.RESERVED, "0")
    n.rebuilt_moves_nobody()
    n.delete("a")
    n.create(ctr("d", pod="d", ns="kube-system", milli=500, cid="d"))
    assert n.a("d").kind is CPUKind.RESERVED


def test_rebuild_keeps_a_reserved_overflow_on_the_shared_cpus() -> None:
    """A reserved request that ran beyond the reserved capacity stays on the root's
    shared CPUs at a rebuild, even once the capacity it lacked has been freed: the
    live policy does not move it then, so a restart must not either (a Hypothesis
    example of the real-machine properties on server-2s-4n-2pmem-112t-isolated: it
    went to the reserved CPUs at the rebuild, an update without cause)."""
    n = Node()
    n.create(ctr("a", pod="a", ns="kube-system", milli=500, cid="a"))
    n.create(ctr("b", pod="b", ns="kube-system", milli=500, cid="b"))
    assert (n.a("b").kind, n.a("b").pool) == (CPUKind.SHARED, "root")
    n.rebuilt_moves_nobody()
    n.delete("a")  # b alone would fit the reserved capacity now
    n.rebuilt_moves_nobody()
    # ... and is still told apart from a reserved container reporting the reserved CPU,
    # whichever the runtime lists first
    n.create(ctr("c", pod="c", ns="kube-system", milli=500, cid="c"))
    assert n.a("c").kind is CPUKind.RESERVED
    n.live = dict(reversed(list(n.live.items())))
    n.rebuilt_moves_nobody()


def test_reserved_resources_test05() -> None:
    """n4c16/test05-reserved-resources, reserved cpuset:7,11 of available 4-7,8-13.

    Four 200m kube-system containers and a 100m one (twice, released in between) fit
    the 2000m of two reserved CPUs; a 2-CPU one does not and runs on every shared CPU.
    """
    config = {
        "availableResources": {"cpu": "cpuset:4-7,8-13"},
        "reservedResources": {"cpu": "cpuset:7,11"},
    }
    n = Node(config)
    reserved = IDSet.parse("7,11")
    n.create(*(ctr(f"p2c{i}", pod="pod2", ns="kube-system", milli=200, cid=f"p2c{i}")
               for i in range(4)))  # fmt: skip
    assert {n.cpus(f"p2c{i}") for i in range(4)} == {reserved}
    for pod in ("pod3", "pod4"):
        n.create(ctr(pod, pod=pod, ns="kube-system", milli=100, cid=pod))
        assert n.cpus(pod) == reserved
        n.delete(pod)
    n.create(ctr("pod5", pod="pod5", ns="kube-system", milli=2000, cid="pod5"))
    assert n.cpus("pod5") == IDSet.parse("4-13") - reserved


# ---- properties ---------------------------------------------------------------------------


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
