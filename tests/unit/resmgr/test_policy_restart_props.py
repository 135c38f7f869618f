"""Property tests of the restart rule: Synchronize from adversarial runtime states.

Each example is one node's history, for both policies on synthetic and shipped machines:

1. while the daemon runs, containers are created and removed (every QoS class, whole and
   fractional requests, some annotations); the runtime reports each where the policy
   put it;
2. the daemon goes down.  Some containers go away; new ones are created by a runtime
   that failed open (no cpuset, or every CPU, sometimes with CPU ids that do not exist);
   and the reports of the others are corrupted: empty, every CPU, an out-of-range or an
   extra CPU added, a CPU dropped, another container's cpuset (a duplicate), any subset;
3. the daemon restarts and rebuilds from the reports, listed in any order, with the
   placement records it kept (issue 24) and without them.

Before step 2, a restart with the records and the exact reports must restore the state
and move nothing, twice (`restart_rule.assert_restart_exact`); with the corrupted
reports, the records must not break the rule either.

The rebuild must not raise and must keep the policy's invariants; on the final picture
(updates applied to the reports) no CPU exclusive to one container is in another's
cpuset (`restart_rule.restart_violations`: shared containers never on exclusive CPUs is
the same statement); a container whose report is a valid exclusive placement that no
other valid claim overlaps is not moved (when such placements are valid together, as
they are when they come from one valid state); and once the updates are applied, a
second Synchronize moves nobody, unless the first had to overcommit or fall back.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from nri_api import api
from nri_resmgr.model import (
    AllocationError,
    AnnotationError,
    ContainerID,
    ContainerInfo,
    CPUKind,
    PolicyState,
    QoSClass,
)
from nri_resmgr.policy.balloons import BalloonsState
from nri_resmgr.policy.base import Policy
from nri_resmgr.policy.kit.rebuild import records_of, restart
from nri_resmgr.policy.static import StaticPolicy, StaticState
from nri_resmgr.policy.topology_aware import TopologyAwarePolicy, TopologyAwareState
from nri_resmgr.policy.topology_aware.preferences import (
    CPU_PRESERVE,
    HIDE_HYPERTHREADS,
    MEMORY_TYPE,
    PREFER_ISOLATED,
    PREFER_SHARED,
)
from nri_resmgr.runtime.pipeline import Pipeline
from nri_resmgr.topology.cpuset import CPUSet, IDSet, IDSetError
from nri_resmgr.topology.load import load_topology
from nri_resmgr.topology.model import Topology
from tests.support.builders import ctr, topo, with_current
from tests.support.logs import QUIET
from tests.support.pipeline import container, sandbox
from tests.support.restart_rule import (
    RestartPolicy,
    applied,
    assert_restart_exact,
    exclusive_cpus,
    moved,
    render,
    restart_violations,
    through_the_file,
)
from tests.unit.resmgr.test_policy_static import check as check_static

SYNTHETIC: dict[str, Mapping[str, object]] = {
    "2s2n2c2t": {"packages": 2, "nodes": 2, "cores": 2, "threads": 2, "memory": "2G"},
    "1s2d-l3-isolated": {
        "packages": 1, "dies": 2, "nodes": 1, "cores": 4, "threads": 2, "l3_per_die": 2,
        "isolated": "3,7,11,15", "memory": "2G",
    },
    "1s1n6c1t": {"packages": 1, "nodes": 1, "cores": 6, "threads": 1, "memory": "2G"},
}  # fmt: skip
SHIPPED = ["two-socket", "hybrid-desktop", "chiplet-l3"]


def machine(name: str) -> Topology:
    return topo(**SYNTHETIC[name]) if name in SYNTHETIC else load_topology(name)


POLICIES: dict[str, Callable[[Topology], RestartPolicy]] = {
    "static": lambda t: StaticPolicy(topology=t, config={"reservedSystemCPUs": "0"}),
    "static-full-strict": lambda t: StaticPolicy(
        topology=t,
        config={
            "reservedResources": {"cpu": "1"},
            "options": {"full-pcpus-only": True, "strict-cpu-reservation": True},
        },
    ),
    "topology-aware": lambda t: TopologyAwarePolicy(topology=t, config={}),
    "topology-aware-fallback": lambda t: TopologyAwarePolicy(
        topology=t, config={"fallbackToShared": True, "reservedResources": {"cpu": "2"}}
    ),
}

ANNOTATIONS = st.dictionaries(
    st.sampled_from([PREFER_ISOLATED, PREFER_SHARED, HIDE_HYPERTHREADS, CPU_PRESERVE]),
    st.sampled_from(["true", "false"]),
    max_size=2,
)


@dataclass(frozen=True)
class Spec:
    qos: QoSClass
    milli: int
    annotations: dict[str, str]


SPECS = st.builds(
    Spec,
    qos=st.sampled_from([QoSClass.GUARANTEED, QoSClass.GUARANTEED, *QoSClass]),
    milli=st.sampled_from([0, 250, 1000, 1500, 2000, 2000, 3000, 4000]),
    annotations=ANNOTATIONS | st.just({}),
)

#: what the runtime reports for a container created while the daemon was down
FAIL_OPEN = ["none", "all", "all+oor", "empty"]
#: how the runtime's report of a running container may be corrupted
MUTATIONS = [
    *["keep"] * 7, "gone", "none", "empty", "all", "all+oor",
    "add-oor", "add-one", "drop-one", "duplicate", "subset",
]  # fmt: skip


def make(name: str, spec: Spec, *, bad_annotation: bool = False) -> ContainerInfo:
    ann = dict(spec.annotations)
    if bad_annotation:
        ann[MEMORY_TYPE] = "nope"
    return ctr(
        name,
        pod=f"pod-{name}",
        qos=spec.qos,
        milli=0 if spec.qos is QoSClass.BEST_EFFORT else spec.milli,
        ann=ann,
        cid=name,
    )


def corrupt(
    how: str, cur: CPUSet | None, *, t: Topology, others: list[CPUSet], data: st.DataObject
) -> CPUSet | None:
    """One report as a misbehaving runtime would give it."""
    online = t.online_cpus()
    beyond = max(online) + 1
    cur_or_none = cur or IDSet()
    if how == "none":
        return None
    if how == "empty":
        return IDSet()
    if how == "all":
        return online
    if how == "all+oor":
        return online | IDSet(range(beyond, beyond + 3))
    if how == "add-oor":
        return cur_or_none | IDSet([beyond + data.draw(st.integers(0, 100), label="oor")])
    if how == "add-one":
        return cur_or_none | IDSet([data.draw(st.sampled_from(sorted(online)), label="extra")])
    if how == "drop-one" and cur:
        return cur - IDSet([data.draw(st.sampled_from(sorted(cur)), label="dropped")])
    if how == "duplicate" and others:
        return data.draw(st.sampled_from(others), label="copied")
    if how == "subset":
        pick = data.draw(st.sets(st.sampled_from(sorted(online)), max_size=6), label="subset")
        return IDSet(pick)
    return cur


def check(p: RestartPolicy, state: PolicyState) -> None:
    if isinstance(p, StaticPolicy):
        assert isinstance(state, StaticState)
        check_static(p, state)
    elif isinstance(p, TopologyAwarePolicy):
        assert isinstance(state, TopologyAwareState)
        p.check(state)
    else:
        assert isinstance(state, BalloonsState)
        p.check(state)


def holds_exclusive(p: RestartPolicy, state: PolicyState, cid: ContainerID) -> bool:
    if isinstance(state, StaticState):
        return bool(state.entries[cid].exclusive)
    assert isinstance(state, TopologyAwareState)
    g = state.grants[cid]
    return g.kind in (CPUKind.EXCLUSIVE, CPUKind.ISOLATED) and g.request.pin_cpu


def exercise(p: RestartPolicy, t: Topology, data: st.DataObject) -> None:
    # 1. the daemon runs: valid placements (stepped as the pipeline does: through the
    # erased `Policy` view, which hands each policy back the states it made)
    q: Policy = p
    s: PolicyState = q.initial_state()
    live: dict[str, ContainerInfo] = {}
    history = data.draw(st.lists(st.tuples(st.integers(0, 9), SPECS), max_size=20), "history")
    for slot, spec in history:
        name = f"c{slot}"
        if name in live:
            s = q.release(s, live.pop(name).id).state
            continue
        c = make(name, spec)
        try:
            s = q.allocate(s, c).state
        except (AllocationError, AnnotationError):
            continue
        live[name] = c
    rendered = render(p, s)
    before = {c.id: rendered[c.id] for c in live.values()}
    assert_restart_exact(p, s, list(live.values()))  # issue 24: nothing moves, twice
    records = through_the_file(records_of(p, s, rendered))

    # 2. the daemon is down: removals, fail-open creations, corrupted reports
    reports: list[ContainerInfo] = []
    shown = [a.cpus for a in before.values() if a.cpus]
    for c in live.values():
        how = data.draw(st.sampled_from(MUTATIONS), label=f"{c.id} report")
        if how == "gone":
            continue
        cur = corrupt(how, before[c.id].cpus or None, t=t, others=shown, data=data)
        mems = before[c.id].mems or None if cur else None
        reports.append(with_current(c, cur, mems))
    creations = st.lists(st.tuples(SPECS, st.sampled_from(FAIL_OPEN), st.booleans()), max_size=6)
    created = data.draw(creations, "fail-open creations")
    for i, (spec, how, bad) in enumerate(created):
        c = make(f"new{i}", spec, bad_annotation=bad and i % 3 == 0)
        reports.append(with_current(c, corrupt(how, None, t=t, others=[], data=data), None))
    reports = data.draw(st.permutations(reports), "listing order")

    # 3. restart (with the records the daemon kept: they never override the reports)
    with_records = restart(p, reports, records)
    check(p, with_records.state)
    assert restart_violations(p, reports, with_records) == [], with_records.reason
    for u in with_records.updates:
        assert u.cpus <= t.online_cpus(), f"{u.container_id}: {u.cpus} not online"
    d = p.rebuild(reports)
    check(p, d.state)
    assert restart_violations(p, reports, d) == [], d.reason
    online = t.online_cpus()
    for u in d.updates:
        assert u.cpus <= online, f"{u.container_id}: {u.cpus} not online"

    # valid exclusive placements that no other valid claim overlaps are not moved
    alone = {}
    for c in reports:
        solo = p.rebuild([c])
        if c.current_cpus and not moved(solo, [c]) and holds_exclusive(p, solo.state, c.id):
            alone[c.id] = c
    clear = [
        c for c in alone.values()
        if all(o.id == c.id or not (o.current_cpus or IDSet()) & (c.current_cpus or IDSet())
               for o in alone.values())
    ]  # fmt: skip
    together = p.rebuild(clear)
    event(f"valid placements no other claim overlaps: {min(len(clear), 3)}+")
    if not moved(together, clear) and all(holds_exclusive(p, together.state, c.id) for c in clear):
        assert not moved(d, reports) & {c.id for c in clear}, d.reason

    # once applied, the state is stable (also with fallbackToShared and hide-hyperthreads)
    event(f"rebuild notes: {d.reason != 'rebuilt'}")
    if d.reason == "rebuilt":
        again = p.rebuild(applied(reports, d))
        assert again.updates == (), again.reason


CASES = [(m, pol) for m in [*SYNTHETIC, *SHIPPED] for pol in POLICIES]
#: examples per case; the long run (docs/architecture.md, "State and restarts") sets more
EXAMPLES = int(os.environ.get("NRI_RESMGR_RESTART_EXAMPLES", "100"))


@pytest.mark.parametrize(("machine_name", "policy_name"), CASES)
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_synchronize_keeps_the_restart_rule(
    machine_name: str, policy_name: str, data: st.DataObject
) -> None:
    t = machine(machine_name)
    exercise(POLICIES[policy_name](t), t, data)


# ---- the same through the pipeline, from NRI messages --------------------------------------

#: cpuset texts a runtime may send: valid, empty, every CPU, ids that do not exist or are
#: past the largest accepted, malformed
CPUSET_TEXTS = st.sampled_from([
    "", " ", "0-15", "0-15,99", "4,12", "5,13", "4", "1-3,9-11", "6-7,14-15", "0-9999",
    "9000", "0-4294967295", "abc", "1-", "3-1", "1,,2", "-1",
])  # fmt: skip
SYNC_CONTAINERS = st.lists(
    st.tuples(
        st.sampled_from(["db", "db", "web", "gone"]),  # the pod ("gone": not reported)
        st.integers(0, 7),  # name slot: a repeated (pod, slot) is a container listed twice
        st.sampled_from([("2", "2"), ("1", "1"), ("500m", None), ("0", None)]),
        CPUSET_TEXTS,
        st.sampled_from([api.ContainerState.CONTAINER_RUNNING] * 3
                        + [api.ContainerState.CONTAINER_CREATED,
                           api.ContainerState.CONTAINER_STOPPED]),
    ),
    max_size=12,
)  # fmt: skip


def _parsed(text: str) -> CPUSet:
    try:
        return IDSet.parse(text)
    except IDSetError:
        return IDSet()


@pytest.mark.parametrize("policy_name", ["static", "topology-aware"])
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=SYNC_CONTAINERS)
@example(  # listed twice: stopped on every CPU, then running on the CPUs db-c0 had
    specs=[
        ("db", 0, ("2", "2"), "", api.ContainerState.CONTAINER_RUNNING),
        ("web", 0, ("2", "2"), "0-15", api.ContainerState.CONTAINER_STOPPED),
        ("web", 0, ("2", "2"), "4,12", api.ContainerState.CONTAINER_RUNNING),
    ]
)
def test_pipeline_synchronize_never_raises_and_keeps_the_rule(
    policy_name: str, specs: list[tuple[str, int, tuple[str, str | None], str, int]]
) -> None:
    t = topo(packages=2, nodes=2, cores=2, threads=2, memory="2G")
    policy = POLICIES[policy_name](t)
    p = Pipeline(policy, log=QUIET)
    pods = {"db": sandbox("db"), "web": sandbox("web", guaranteed=False),
            "gone": sandbox("gone")}  # fmt: skip
    containers = []
    for pod, slot, (cpu, limit), text, state in specs:
        c = container(pods[pod], f"c{slot}", cpu=cpu, limit=limit, state=state)
        c.linux.resources.cpu.cpus = text
        containers.append(c)
    updates = p.synchronize([pods["db"], pods["web"]], containers)

    online = t.online_cpus()
    final: dict[str, CPUSet] = {}
    for c in containers:
        # a container listed twice runs on the cpuset of its first live listing (the one
        # Synchronize keeps); a stopped listing's cpuset is on no running task
        if c.state != api.ContainerState.CONTAINER_STOPPED:
            final.setdefault(c.id, _parsed(c.linux.resources.cpu.cpus))
    for u in updates:
        cpus = IDSet.parse(u.linux.resources.cpu.cpus)
        assert cpus <= online, f"{u.container_id}: {cpus} not online"
        if cpus:
            final[u.container_id] = cpus
    managed = set(p.containers)
    live = {
        c.id for c in containers
        if c.pod_sandbox_id != pods["gone"].id and c.state != api.ContainerState.CONTAINER_STOPPED
    }  # fmt: skip
    assert managed == live, "every running container of a known pod is accounted for"
    for owner, cpus in exclusive_cpus(policy, p.state).items():
        for other in managed - {owner}:
            assert not cpus & final[other], (
                f"{cpus & final[other]} exclusive to {owner} and in {other}'s {final[other]}"
            )


def test_hide_hyperthreads_fallback_to_shared_is_stable_across_restarts() -> None:
    """A hide-hyperthreads container that fell back to shared shows one thread per core
    of its pool's shared CPUs; a second Synchronize must read that as shared (as the
    first placed it), not as a 3-CPU exclusive claim that pushes its neighbour away."""
    t = machine("1s2d-l3-isolated")
    p = POLICIES["topology-aware-fallback"](t)
    zero = make("new0", Spec(QoSClass.GUARANTEED, 0, {}))
    hidden = make("new1", Spec(QoSClass.GUARANTEED, 3000, {HIDE_HYPERTHREADS: "true"}))
    reports = [with_current(zero, None, None), with_current(hidden, t.online_cpus(), None)]
    d = p.rebuild(reports)
    assert d.reason == "rebuilt"
    again = p.rebuild(applied(reports, d))
    assert again.updates == (), [(u.container_id, u.cpus) for u in again.updates]
