"""The topology-aware policy's shortcuts decide exactly what the plain computation does.

A decision avoids work that cannot change its outcome (docs/policies.md, "Performance"):
the supply is kept on the state and derived grant by grant, affinity rules weigh only
the containers the subject index says they can match, only the containers whose
rendering can change are rendered (`rendering.render_changed`), and offers are built in the
order of the best key each pool could reach (`scoring.key_bound`), stopping once no pool
left can win.  The oracle here, `PlainPolicy`, is the policy as it was before those
shortcuts: every pool's offer against a supply derived from every grant, every
container rendered before and after, the updates found by `diff_updates`.  For random
sequences of creations, updates, releases and rebuilds, both must give the same
decisions (assignment, updates, reason, grants) and the same errors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nri_resmgr.model import (
    AllocationError,
    Assignment,
    ContainerID,
    ContainerInfo,
    CPUKind,
    Decision,
    QoSClass,
)
from nri_resmgr.policy.common import take_cpus
from nri_resmgr.policy.topology_aware import TopologyAwarePolicy
from nri_resmgr.policy.topology_aware.affinity import diluted_scores, pool_weights
from nri_resmgr.policy.topology_aware.invariants import check_addition, invariant_problems
from nri_resmgr.policy.topology_aware.offers import (
    Offer,
    _shared_check,
    allocatable_by_pool,
    burst_key,
    make_offer,
)
from nri_resmgr.policy.topology_aware.placement import Placer
from nri_resmgr.policy.topology_aware.pools import TOPOLOGY_LEVELS
from nri_resmgr.policy.topology_aware.preferences import ContainerRequest, container_request
from nri_resmgr.policy.topology_aware.priority import CPUPriority
from nri_resmgr.policy.topology_aware.rebuild import Rebuilder
from nri_resmgr.policy.topology_aware.rendering import render
from nri_resmgr.policy.topology_aware.scoring import (
    affinity_by_pool,
    best_offer,
    key_bound,
    key_bounds,
    offer_key,
)
from nri_resmgr.policy.topology_aware.state import (
    Grant,
    TopologyAwareState,
    supply_from_scratch,
)
from nri_resmgr.topology.cpuset import CPUSet, IDSet
from nri_resmgr.topology.load import load_topology
from nri_resmgr.topology.model import Topology
from tests.support.builders import topo, with_current
from tests.support.requirements import REPO
from tests.support.topology_aware import OPS, SYNTHETIC, Op, make, plain_offer

SERVER = REPO / "examples" / "topologies" / "server-2s-224t.yaml"


def render_all_plain(
    policy: TopologyAwarePolicy, state: TopologyAwareState
) -> dict[ContainerID, Assignment]:
    supply = supply_from_scratch(policy.tree, state.grants.values())
    return {
        cid: render(tree=policy.tree, topology=policy.topology, supply=supply, grant=g)
        for cid, g in state.grants.items()
    }


class PlainPlacer(Placer):
    """Every candidate's offer against a supply derived from every grant (the oracle)."""

    def place(
        self,
        state: TopologyAwareState,
        container: ContainerInfo,
        request: ContainerRequest,
        *,
        hint: int | None,
        prefer: Sequence[CPUSet],
        root_only: bool = False,
    ) -> tuple[Grant, str]:
        supply = supply_from_scratch(self.tree, state.grants.values())
        offers: list[Offer] = []
        reasons: list[str] = []
        for pool in self.candidates(request, root_only=root_only):
            got = make_offer(
                tree=self.tree,
                topology=self.topology,
                allocator=self.allocator,
                supply=supply,
                pool=pool,
                container_id=container.id,
                pod_id=container.pod.id,
                namespace=container.namespace,
                request=request,
                prefer=prefer,
                priorities=self.priorities,
            )
            if isinstance(got, Offer):
                offers.append(got)
            else:
                reasons.append(f"{pool.name}: {got}")
        # every grant weighed (not the subject index of `scoring.affinity_candidates`)
        weights = pool_weights(
            request.affinities,
            ((g.container_id, g.pool, g.request.subject) for g in state.grants.values()),
            self_id=container.id,
        )
        affinities = diluted_scores(self.tree, weights) if request.affinities else {}
        best = best_offer(offers, hint=hint, affinities=affinities, tree=self.tree)
        if best is not None:
            return best.grant, f"{best.grant.kind} in {best.pool.name}"
        message = f"{container.pretty}: no pool can fit {request.describe()}; " + "; ".join(reasons)
        return self.fall_back(state, container, request, message, hint=hint, prefer=prefer)


class PlainRebuilder(Rebuilder):
    """Each kept claim checked against every invariant of the whole state (the oracle)."""

    def check_addition(self, state: TopologyAwareState, grant: Grant) -> tuple[str, ...]:
        return invariant_problems(self.topology, state.with_grant(grant))


class PlainPolicy(TopologyAwarePolicy):
    """The decisions without shortcuts (module docstring): the test oracle."""

    def __init__(self, *, topology: Topology, config: Mapping[str, Any]) -> None:
        super().__init__(topology=topology, config=config)
        self.placer = PlainPlacer.build(topology, self.tree, self.config)
        self.rebuilder = PlainRebuilder(self.placer)

    def _render_changed(
        self, old: TopologyAwareState, new: TopologyAwareState, cid: ContainerID
    ) -> tuple[dict[ContainerID, Assignment], dict[ContainerID, Assignment]]:
        return render_all_plain(self, old), render_all_plain(self, new)


def same(fast: Decision, plain: Decision) -> None:
    assert fast.assignment == plain.assignment
    assert fast.updates == plain.updates
    assert fast.reason == plain.reason
    assert isinstance(fast.state, TopologyAwareState)
    assert isinstance(plain.state, TopologyAwareState)
    assert fast.state.grants == plain.state.grants


def run(fast: TopologyAwarePolicy, plain: PlainPolicy, step: Any) -> Decision | str:
    try:
        out: Decision = step(fast)
    except AllocationError as exc:
        with pytest.raises(AllocationError) as caught:
            step(plain)
        assert str(caught.value) == str(exc)
        return str(exc)
    same(out, step(plain))
    return out


def compare(
    topology: Topology,
    config: Mapping[str, object],
    ops: list[Op],
    data: st.DataObject | None = None,
) -> None:
    fast = TopologyAwarePolicy(topology=topology, config=config)
    plain = PlainPolicy(topology=topology, config=config)
    s = fast.initial_state()
    live: dict[str, ContainerInfo] = {}
    for op in ops:
        c = make(op)
        if op.create:
            # a second creation of a live slot is an update with the new request
            d = run(fast, plain, lambda p, s=s, c=c: p.allocate(s, c))
            if isinstance(d, str):
                continue
            live[c.id] = c
        elif c.id in live:
            cid = live.pop(c.id).id
            d = run(fast, plain, lambda p, s=s, cid=cid: p.release(s, cid))
            assert not isinstance(d, str)
        else:
            continue
        assert isinstance(d.state, TopologyAwareState)
        s = d.state
        # the supply kept grant by grant is the supply derived from every grant
        assert s.supply == supply_from_scratch(fast.tree, s.grants.values())
    rendered = fast.render(s)
    assert rendered == render_all_plain(fast, s)
    reported = [with_current(c, rendered[c.id].cpus, rendered[c.id].mems) for c in live.values()]
    d = run(fast, plain, lambda p: p.rebuild(reported))
    assert not isinstance(d, str)
    # rebuilt from whatever the runtime reports (overlaps, stale or foreign CPUs)
    if data is not None:
        cpus = sorted(topology.online_cpus())
        odd = [
            replace(
                c,
                current_cpus=IDSet(data.draw(st.sets(st.sampled_from(cpus), max_size=4))),
            )
            for c in live.values()
        ]
        d = run(fast, plain, lambda p: p.rebuild(odd))
        assert not isinstance(d, str)
    # rebuilt from scratch, nothing reported: everyone placed anew
    fresh = [replace(c, current_cpus=None, current_mems=None) for c in live.values()]
    d = run(fast, plain, lambda p: p.rebuild(fresh))
    assert not isinstance(d, str)
    assert isinstance(d.state, TopologyAwareState)
    assert d.state.supply == supply_from_scratch(fast.tree, d.state.grants.values())


@pytest.mark.parametrize("name", list(SYNTHETIC))
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, colocate=st.booleans(), fallback=st.booleans(), data=st.data())
def test_fast_decisions_equal_plain_ones(
    name: str, ops: list[Op], colocate: bool, fallback: bool, data: st.DataObject
) -> None:
    config = {
        "colocatePods": colocate,
        "colocateNamespaces": colocate,
        "fallbackToShared": fallback,
    }
    compare(topo(**SYNTHETIC[name]), config, ops, data)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, fallback=st.booleans())
def test_fast_decisions_equal_plain_ones_on_the_bench_machine(
    ops: list[Op], fallback: bool
) -> None:
    compare(load_topology(SERVER), {"fallbackToShared": fallback}, ops)


@pytest.mark.parametrize("name", list(SYNTHETIC))
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, data=st.data())
def test_check_addition_equals_the_full_check(
    name: str, ops: list[Op], data: st.DataObject
) -> None:
    """On a valid state, checking only what a new grant touches finds a problem exactly
    when `check_invariants` of the larger state does."""
    t = topo(**SYNTHETIC[name])
    p = TopologyAwarePolicy(topology=t, config={})
    s = p.initial_state()
    for op in ops:
        try:
            s = p.allocate(s, make(op)).state
        except AllocationError:
            continue
    p.check(s)
    if not s.grants:
        return
    model = data.draw(st.sampled_from(sorted(s.grants.values(), key=lambda g: g.container_id)))
    exclusive = IDSet(data.draw(st.sets(st.sampled_from(sorted(t.online_cpus())), max_size=4)))
    grant = Grant(
        container_id=ContainerID("newcomer"),
        pod_id=model.pod_id,
        namespace=model.namespace,
        pool=data.draw(st.sampled_from([q.index for q in p.tree.pools])),
        kind=data.draw(st.sampled_from(list(CPUKind))),
        exclusive=exclusive,
        request=replace(
            model.request, full=data.draw(st.sampled_from([len(exclusive), model.request.full]))
        ),
    )
    full = invariant_problems(p.topology, s.with_grant(grant))
    found = check_addition(p.topology, s, grant)
    assert bool(found) == bool(full)
    assert set(found) <= set(full)


@pytest.mark.parametrize("name", list(SYNTHETIC))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, colocate=st.booleans(), data=st.data())
def test_key_bounds_equal_key_bound_of_each_pool(
    name: str, ops: list[Op], colocate: bool, data: st.DataObject
) -> None:
    """`scoring.key_bounds` (the request's terms worked out once for all pools) gives
    each candidate the key `key_bound` gives it, smallest first, for the requests of
    random sequences (with any CPU priority, isolated preference and Burstable terms),
    in the states they lead to; for a request whose offer takes no CPUs (shared,
    reserved, unpinned), each offer's key is that bound (`Placer.rank` takes it so)."""
    config = {"colocatePods": colocate, "colocateNamespaces": colocate}
    p = TopologyAwarePolicy(topology=topo(**SYNTHETIC[name]), config=config)
    tree = p.tree
    s = p.initial_state()
    for op in ops:
        c = make(op)
        request = replace(
            p.requests.of(c),
            cpu_priority=data.draw(st.sampled_from(list(CPUPriority))),
            prefer_isolated=data.draw(st.booleans()),
            limit_milli=data.draw(st.sampled_from([0, 0, 500, 4000])),
            unlimited_level=data.draw(st.sampled_from([None, *TOPOLOGY_LEVELS])),
        )
        hint = data.draw(st.sampled_from([None, *range(len(tree.pools))]))
        affinities = affinity_by_pool(s, tree, container_id=c.id, request=request)
        rooms = allocatable_by_pool(tree, s.supply)
        for root_only in (False, True):
            candidates = p.placer.candidates(request, root_only=root_only)
            bursts = {
                q.index: burst_key(tree, s.supply, q, request, room=rooms[q.index])
                for q in candidates
            }
            want = sorted(
                (
                    (
                        key_bound(
                            q,
                            tree=tree,
                            supply=s.supply,
                            request=request,
                            hinted=q.index == hint,
                            affinity_score=affinities.get(q.index, 0),
                            room=rooms[q.index],
                            priorities=p.priorities,
                            burst=bursts[q.index],
                        ),
                        q,
                    )
                    for q in candidates
                ),
                key=lambda kq: kq[0],
            )
            got = key_bounds(
                candidates,
                tree=tree,
                supply=s.supply,
                request=request,
                hint=hint,
                affinities=affinities,
                rooms=rooms,
                priorities=p.priorities,
                bursts=bursts,
            )
            assert got == want
            if request.kind in (CPUKind.SHARED, CPUKind.RESERVED, CPUKind.NONE):
                # `Placer.rank` keys an offer that takes no CPUs by its bound
                for bound, q in got:
                    offer = plain_offer(p, s, q, c, request)
                    if isinstance(offer, Offer):
                        hinted = q.index == hint
                        score = affinities.get(q.index, 0)
                        assert (
                            offer_key(offer, hinted=hinted, affinity_score=score, tree=tree)
                            == bound
                        )
        try:
            s = p.allocate(s, c).state
        except AllocationError:
            continue


@pytest.mark.parametrize(
    ("full", "expected"),
    [(("root",), "root has 0m free"), (("package0",), "package0 has 0m free"),
     (("root", "package0"), "root has 0m free"), ((), "")],
)  # fmt: skip
def test_the_shared_check_of_nothing_taken_walks_the_pools_line_in_pool_order(
    full: tuple[str, ...], expected: str
) -> None:
    """With no CPUs taken only the pool and its ancestors can be short (`_shared_check`
    walks those alone), and the first short one in pool order is named, as the walk of
    every pool names it: the root before the package before the node."""
    p = TopologyAwarePolicy(topology=topo(**SYNTHETIC["2s2n2c2t"]), config={})
    supply = p.initial_state().supply
    demand = list(supply.demand)
    for name in full:
        i = p.tree.by_name(name).index
        demand[i] = 1000 * len(supply.shared[i])
    request = p.requests.of(make(Op(True, 1, QoSClass.BURSTABLE, 250, False, False, 0, {})))
    found = _shared_check(
        p.tree, replace(supply, demand=tuple(demand)), p.tree.by_name("node0"), IDSet(), request
    )
    assert found.startswith(expected) and bool(found) == bool(expected)


def test_without_and_with_grant_keep_the_supply_exact_for_overlapping_grants() -> None:
    """A broken state (a CPU held twice) still gets the supply derived from scratch."""
    t = topo(**SYNTHETIC["2s2n2c2t"])
    p = TopologyAwarePolicy(topology=t, config={})
    c = make(Op(True, 1, QoSClass.GUARANTEED, 2000, False, False, 0, {}))
    s = p.allocate(p.initial_state(), c).state
    assert isinstance(s, TopologyAwareState)
    grant = s.grants[c.id]
    assert grant.exclusive
    twin = Grant(
        container_id=ContainerID("twin"),
        pod_id=grant.pod_id,
        namespace=grant.namespace,
        pool=grant.pool,
        kind=grant.kind,
        exclusive=grant.exclusive,
        request=grant.request,
    )
    broken = s.with_grant(twin)
    assert broken.supply == supply_from_scratch(p.tree, broken.grants.values())
    back = broken.without(ContainerID("twin"))
    assert back.supply == supply_from_scratch(p.tree, back.grants.values())
    assert back.supply.used == grant.exclusive


def test_the_request_memo_answers_for_the_very_container_asked() -> None:
    """`RequestMemo` keeps the last answer for that container object only: one with the
    same id and another request (a resize, a repeated creation) is asked anew."""
    p = TopologyAwarePolicy(topology=topo(**SYNTHETIC["2s2n2c2t"]), config={})
    shared = make(Op(True, 1, QoSClass.BURSTABLE, 250, False, False, 0, {}))
    whole = make(Op(True, 1, QoSClass.GUARANTEED, 2000, False, False, 0, {}))
    assert shared.id == whole.id
    for c in (shared, shared, whole, shared, whole, whole):
        assert p.requests.of(c) == container_request(c, p.config)


# ---- the CPU pickers against their plain form -----------------------------------------


def _take_cpus_plain(
    topology: Topology, available: CPUSet, count: int, *, full_cores_only: bool
) -> CPUSet | None:
    """`common._take_cpus` as first written: domain counts recomputed for every CPU."""
    if count <= 0:
        return IDSet()
    if count > len(available):
        return None
    free = set(available)
    taken: list[int] = []

    def take_whole(groups: Any) -> None:
        for cpus in groups:
            need = count - len(taken)
            if 0 < len(cpus) <= need and cpus.ids() <= free:
                taken.extend(cpus)
                free.difference_update(cpus)

    take_whole(topology.package_cpus(p) for p in topology.package_ids())
    take_whole(topology.node_cpus(n) for n in topology.node_ids(with_cpus=True))

    def free_in(cpus: CPUSet) -> int:
        return len(free & cpus.ids())

    def packing_key(cpu: int) -> tuple[int, ...]:
        rec = topology.cpu(cpu)
        return (
            free_in(topology.package_cpus(rec.package_id)),
            rec.package_id,
            free_in(topology.node_cpus(rec.node_id)),
            rec.node_id,
            free_in(topology.l3_cpus(rec.l3_id)),
            rec.l3_id,
        )

    cores = [
        t
        for t in topology.cores_of(IDSet(free)).values()
        if len(t) == len(topology.siblings(t.sorted()[0]))
    ]
    cores.sort(key=lambda t: (*packing_key(t.sorted()[0]), t.sorted()[0]))
    for threads in cores:
        if len(threads) <= count - len(taken):
            taken.extend(threads)
            free.difference_update(threads)
    need = count - len(taken)
    if need == 0:
        return IDSet(taken)
    if full_cores_only:
        return None
    rest = sorted(free, key=lambda c: (free_in(topology.siblings(c)), *packing_key(c), c))
    taken.extend(rest[:need])
    return IDSet(taken) if len(taken) == count else None


@pytest.mark.parametrize("name", list(SYNTHETIC))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_take_cpus_equals_its_plain_form(name: str, data: st.DataObject) -> None:
    t = topo(**SYNTHETIC[name])
    cpus = sorted(t.online_cpus())
    available = IDSet(data.draw(st.sets(st.sampled_from(cpus))))
    count = data.draw(st.integers(0, len(cpus)))
    full = data.draw(st.booleans())
    assert take_cpus(t, available, count, full_cores_only=full) == _take_cpus_plain(
        t, available, count, full_cores_only=full
    )
