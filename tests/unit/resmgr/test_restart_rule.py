"""The restart rule, one regression per finding of issue 11 (items 1 and 4), both policies.

After any Synchronize, whatever the runtime reports, no CPU is exclusive to one container
and in the cpuset of another; and a container whose reported cpuset conflicts with a
valid exclusive grant is the one that moves (`restart_rule`).  The pipeline tests at the
end feed the same inputs as NRI messages: Synchronize must never raise for them.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from nri_resmgr.model import ContainerID, ContainerInfo, CPUKind, PolicyState, QoSClass
from nri_resmgr.policy.balloons import BalloonsPolicy
from nri_resmgr.policy.base import Policy
from nri_resmgr.policy.static import StaticPolicy
from nri_resmgr.policy.topology_aware import TopologyAwarePolicy, TopologyAwareState
from nri_resmgr.policy.topology_aware.preferences import MEMORY_TYPE
from nri_resmgr.runtime.pipeline import Pipeline
from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.model import Topology
from tests.support.builders import ctr, small, topo, with_current
from tests.support.logs import QUIET
from tests.support.pipeline import container, sandbox
from tests.support.restart_rule import (
    RestartPolicy,
    applied,
    final_cpusets,
    moved,
    render,
    restart_violations,
)

BE = QoSClass.BEST_EFFORT
BU = QoSClass.BURSTABLE

#: 2 packages x 2 nodes x 8 cores x 2 threads: 64 CPUs
BIG = {"packages": 2, "nodes": 2, "cores": 8, "threads": 2, "memory": "8G"}

PolicyMaker = Callable[[Topology], RestartPolicy]


def static(t: Topology) -> RestartPolicy:
    return StaticPolicy(topology=t, config={"reservedSystemCPUs": "0"})


def topology_aware(t: Topology) -> RestartPolicy:
    return TopologyAwarePolicy(topology=t, config={})


def balloons(t: Topology) -> RestartPolicy:
    return BalloonsPolicy(topology=t, config={"reservedResources": {"cpu": "cpuset:0"}})


#: the policies that grant a container CPUs of its own: the tests of which grant wins
EXCLUSIVE = [pytest.param(static, id="static"), pytest.param(topology_aware, id="topology-aware")]
#: balloons too: its containers share their balloon's CPUs, which grow and shrink with
#: the balloon, so who moves is its own rule (`test_balloons_keep_the_rule_and_settle`)
POLICIES = [*EXCLUSIVE, pytest.param(balloons, id="balloons")]


def placed(p: RestartPolicy, containers: list[ContainerInfo]) -> list[ContainerInfo]:
    """`containers` allocated in order, reported where the policy put them."""
    q: Policy = p  # the erased view the pipeline steps policies through
    s: PolicyState = q.initial_state()
    for c in containers:
        s = q.allocate(s, c).state
    r = render(p, s)
    return [with_current(c, r[c.id].cpus, r[c.id].mems) for c in containers]


# ---- finding 1: exclusive CPUs shared after a restart ---------------------------------------


@pytest.mark.parametrize("make", EXCLUSIVE)
def test_fail_open_guaranteed_never_share_cpus_with_a_full_shared_pool(make: PolicyMaker) -> None:
    """Shared containers fill the pool; Guaranteed ones created while the daemon was down."""
    p = make(small())
    shared = placed(p, [ctr(f"s{i}", pod=f"s{i}", qos=BU, milli=1000) for i in range(10)])
    # the runtime failed open: no cpuset at all, or every CPU
    fail_open = [
        ctr(f"g{i}", pod=f"g{i}", milli=2000, cur="0-15" if i % 2 else None) for i in range(3)
    ]
    reports = shared + fail_open
    d = p.rebuild(reports)
    assert restart_violations(p, reports, d) == []
    final = final_cpusets(reports, d)
    for g in fail_open:
        assert len(final[g.id]) == 2, d.reason


def test_a_container_that_fits_nowhere_is_moved_off_exclusive_cpus() -> None:
    """It used to be "left untouched" on CPUs that were now exclusive to another."""
    p = TopologyAwarePolicy(topology=small(), config={})
    cs = [
        ctr("a", pod="a", milli=14000, cur="1-7,9-15"),
        ctr("b", pod="b", milli=2000, cur="1,9", cur_mems="0"),
        ctr("c", pod="c", qos=BE, ann={MEMORY_TYPE: "nope"}, cur="1-15"),
    ]
    d = p.rebuild(cs)
    p.check(d.state)
    assert restart_violations(p, cs, d) == []
    assert isinstance(d.state, TopologyAwareState)
    # b keeps its valid grant; a and c run on shared CPUs, their demand not counted
    assert str(d.state.grants[cs[1].id].exclusive) == "1,9"
    assert d.state.grants[cs[0].id].kind is CPUKind.SHARED
    assert d.state.grants[cs[2].id].kind is CPUKind.SHARED
    assert "overcommitted: pod default/a container a: no pool can fit" in d.reason
    assert "overcommitted: pod default/c container c: annotation memory-type" in d.reason
    assert {u.container_id for u in d.updates} == {cs[0].id, cs[2].id}
    # once applied, a second Synchronize moves nobody
    assert p.rebuild(applied(cs, d)).updates == ()


# ---- finding 4: a claim that conflicts with valid grants loses ---------------------------


def _twenty_five(p: RestartPolicy) -> list[ContainerInfo]:
    """25 exclusive containers placed with a history (3 of 28 gone), and one shared."""
    every = [ctr(f"x{i:02}", pod=f"x{i:02}", milli=2000) for i in range(28)]
    q: Policy = p  # the erased view the pipeline steps policies through
    s: PolicyState = q.initial_state()
    for c in every:
        s = q.allocate(s, c).state
    gone = every[1::10]
    for c in gone:
        s = q.release(s, c.id).state
    claimant = ctr("claimant", pod="claimant", qos=BE)
    s = q.allocate(s, claimant).state
    r = render(p, s)
    live = [c for c in every if c not in gone] + [claimant]
    return [with_current(c, r[c.id].cpus, r[c.id].mems) for c in live]


@pytest.mark.parametrize("make", POLICIES)
@pytest.mark.parametrize("claim", ["0-63", "0-63,64-70", ""])
def test_a_shared_claim_of_every_cpu_moves_no_valid_exclusive(
    make: PolicyMaker, claim: str
) -> None:
    p = make(topo(**BIG))
    reports = _twenty_five(p)
    claimant = reports[-1]
    reports[-1] = with_current(claimant, IDSet.parse(claim), None)
    d = p.rebuild(reports)
    assert restart_violations(p, reports, d) == []
    assert moved(d, reports) <= {claimant.id}


@pytest.mark.parametrize("make", EXCLUSIVE)
def test_a_fail_open_guaranteed_claim_of_every_cpu_is_the_one_that_moves(
    make: PolicyMaker,
) -> None:
    p = make(topo(**BIG))
    reports = _twenty_five(p)[:-1]
    late = ctr("late", pod="late", milli=2000, cur="0-63")
    d = p.rebuild([late, *reports])
    assert restart_violations(p, [late, *reports], d) == []
    assert moved(d, [late, *reports]) == {late.id}


@pytest.mark.parametrize("make", EXCLUSIVE)
def test_two_containers_reporting_the_same_exclusive_cpus_one_keeps_them(
    make: PolicyMaker,
) -> None:
    p = make(small())
    twins = [
        ctr("b", pod="b", milli=2000, cur="4,12", cur_mems="2"),
        ctr("a", pod="a", milli=2000, cur="4,12", cur_mems="2"),
    ]
    for listed in (twins, twins[::-1]):
        d = p.rebuild(listed)
        assert restart_violations(p, listed, d) == []
        # the first listed keeps them (a pure function of the runtime's report)
        assert moved(d, listed) == {listed[1].id}


@pytest.mark.parametrize("make", EXCLUSIVE)
def test_smaller_valid_claims_win_over_one_covering_them(make: PolicyMaker) -> None:
    """A 4-CPU claim covering two valid 2-CPU grants moves; the two stay."""
    p = make(small())
    cs = [
        ctr("big", pod="big", milli=4000, cur="4,6,12,14"),
        ctr("x", pod="x", milli=2000, cur="4,12"),
        ctr("y", pod="y", milli=2000, cur="6,14"),
    ]
    d = p.rebuild(cs)
    assert restart_violations(p, cs, d) == []
    assert moved(d, cs) == {cs[0].id}


@pytest.mark.parametrize("make", EXCLUSIVE)
@pytest.mark.parametrize(
    "cur",
    ["4,12,99", "4,12,16", "", "4", "0-15"],
    ids=["out-of-range", "offline", "empty", "short", "all"],
)
def test_an_invalid_report_moves_only_its_owner(make: PolicyMaker, cur: str) -> None:
    p = make(small())
    keep = placed(p, [ctr("k", pod="k", milli=2000), ctr("s", pod="s", qos=BU, milli=500)])
    bad = ctr("bad", pod="bad", milli=2000, cur=cur)
    reports = [bad, *keep]
    d = p.rebuild(reports)
    assert restart_violations(p, reports, d) == []
    assert keep[0].id not in moved(d, reports)


# ---- the pipeline: Synchronize never raises ------------------------------------------------


@pytest.mark.parametrize("make", EXCLUSIVE)
def test_synchronize_places_a_container_whose_cpuset_cannot_be_read(make: PolicyMaker) -> None:
    """A cpuset beyond the largest CPU id is "unknown", not a reason to skip the container."""
    p = Pipeline(make(small()), log=QUIET)
    pod = sandbox("db")
    kept = container(pod, "kept", cpu="2", limit="2", cpus="4,12")
    wild = container(pod, "wild", cpu="2", limit="2", cpus="4,12,9000-9999")
    updates = p.synchronize([pod], [kept, wild])
    assert set(p.containers) == {ContainerID("db-kept"), ContainerID("db-wild")}
    got = {u.container_id: IDSet.parse(u.linux.resources.cpu.cpus) for u in updates}
    assert got.get(ContainerID("db-kept"), IDSet.parse("4,12")) == IDSet.parse("4,12")
    assert len(got["db-wild"]) == 2 and got["db-wild"].isdisjoint(IDSet.parse("4,12"))


@pytest.mark.parametrize("make", EXCLUSIVE)
def test_synchronize_takes_a_container_listed_twice_once(make: PolicyMaker) -> None:
    p = Pipeline(make(small()), log=QUIET)
    pod = sandbox("db")
    first = container(pod, "a", cpu="2", limit="2", cpus="4,12")
    again = container(pod, "a", cpu="2", limit="2", cpus="5,13")
    other = container(pod, "b", cpu="2", limit="2", cpus="6,14")
    updates = p.synchronize([pod], [first, again, other])
    assert list(p.containers) == [ContainerID("db-a"), ContainerID("db-b")]
    # the first report of db-a counts; nobody moves (an update may still pin memory)
    for u in updates:
        assert u.linux.resources.cpu.cpus in ("", {"db-a": "4,12", "db-b": "6,14"}[u.container_id])
    assert p.assignments[ContainerID("db-a")].cpus == IDSet.parse("4,12")


def test_with_no_shared_cpu_at_all_a_shared_container_goes_to_the_reserved_ones() -> None:
    """Every usable CPU isolated: the Burstable container cannot be placed by its request,
    and it used to be left on 0-1 while CPU 1 was isolated for the Guaranteed one."""
    t = topo(packages=1, nodes=1, cores=2, threads=1, memory="1G", isolated="1")
    p = TopologyAwarePolicy(topology=t, config={"reservedResources": {"cpu": "cpuset:0"}})
    cs = [ctr("s", pod="s", qos=BU, milli=100, cur="0-1"), ctr("g", pod="g", milli=1000)]
    d = p.rebuild(cs)
    p.check(d.state)
    assert restart_violations(p, cs, d) == []
    assert final_cpusets(cs, d) == {cs[0].id: IDSet([0]), cs[1].id: IDSet([1])}
    assert "on the reserved CPUs: pod default/s container s" in d.reason


# ---- balloons: the rule on the same reports, and the fixed point ---------------------------


def _balloons_scenarios() -> dict[str, tuple[Topology, list[ContainerInfo]]]:
    big = topo(**BIG)
    p_small, p_big = balloons(small()), balloons(big)
    shared = placed(p_small, [ctr(f"s{i}", pod=f"s{i}", qos=BU, milli=1000) for i in range(10)])
    fail_open = [
        ctr(f"g{i}", pod=f"g{i}", milli=2000, cur="0-15" if i % 2 else None) for i in range(3)
    ]
    keep = placed(p_small, [ctr("k", pod="k", milli=2000), ctr("s", pod="s", qos=BU, milli=500)])
    out = {
        "fail-open": (small(), shared + fail_open),
        "late-claim-of-all": (
            big,
            [ctr("late", pod="late", milli=2000, cur="0-63"), *_twenty_five(p_big)[:-1]],
        ),
        "twins": (
            small(),
            [
                ctr("b", pod="b", milli=2000, cur="4,12", cur_mems="2"),
                ctr("a", pod="a", milli=2000, cur="4,12", cur_mems="2"),
            ],
        ),
        "covering": (
            small(),
            [
                ctr("big", pod="big", milli=4000, cur="4,6,12,14"),
                ctr("x", pod="x", milli=2000, cur="4,12"),
                ctr("y", pod="y", milli=2000, cur="6,14"),
            ],
        ),
    }
    for cur in ["4,12,99", "4,12,16", "", "4", "0-15"]:
        out[f"invalid-{cur}"] = (small(), [ctr("bad", pod="bad", milli=2000, cur=cur), *keep])
    return out


@pytest.mark.parametrize("scenario", sorted(_balloons_scenarios()))
def test_balloons_keep_the_rule_and_settle(scenario: str) -> None:
    """No CPU of one balloon is in the cpuset of another's container, and once the
    updates are applied a second Synchronize moves nobody."""
    t, reports = _balloons_scenarios()[scenario]
    p = BalloonsPolicy(topology=t, config={"reservedResources": {"cpu": "cpuset:0"}})
    d = p.rebuild(reports)
    p.check(d.state)
    assert restart_violations(p, reports, d) == []
    again = p.rebuild(applied(reports, d))
    assert again.updates == (), [str(u.container_id) for u in again.updates]
