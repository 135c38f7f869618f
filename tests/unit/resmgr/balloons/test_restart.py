"""Restarts of the balloons policy with placement records (issue 24): exact, twice.

Each example is one node's history under the balloons policy: containers are created,
updated (their CPU request), deleted, and the configuration is replaced (the new policy
rebuilds from the runtime's report, as a live reload does), on the test machine, on
every shipped machine and on random ones, with configurations drawing composites (of
every kind, ``balance-balloons``, nested, a composite reserved balloon), ``minBalloons``,
``maxBalloons``, ``preferNewBalloons``, ``shareIdleCPUsInSame`` at every level, the
reserved balloon and its namespaces, ``groupBy``, hidden hyperthreads, pinned memory and
memory types, and preserved containers.  From the state reached, a restart with the
records and the runtime's report restores exactly that state (the same balloons, in the
same order, with the same CPUs, shared idle CPUs, components and members) and moves
nothing, and so does a second one (`restart_rule.assert_restart_exact`).  With the
records lost, the rebuild keeps the restart rule (no CPU of a balloon in the cpuset of a
container outside it) and moves no container without naming it and the cause in its
reason (`restart_rule.unexplained_moves`; the examples it found are in
test_rebuild_causes.py), and how often it guesses a state other than the daemon's, or
moves a container (with its cause), is counted (`event`;
``--hypothesis-show-statistics``): today's rebuild still moves some
(docs/architecture.md, "State and restarts").

The issue's named case, a ``balance-balloons`` composite that cannot show which
component it had, is a test of its own: restored exactly with records, and shown to be
guessed wrong without.

The number of examples is ``NRI_RESMGR_RESTART_EXAMPLES`` (CI: the default); the long
run is documented in docs/architecture.md, "State and restarts".
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from nri_resmgr.model import ContainerID, ContainerInfo, ResmgrError
from nri_resmgr.policy.balloons import BALLOON_ANNOTATION, BalloonsPolicy, BalloonsState
from nri_resmgr.policy.balloons.invariants import violations
from nri_resmgr.policy.kit.annotations import CPU_PRESERVE, HIDE_HYPERTHREADS, MEMORY_TYPE
from nri_resmgr.policy.kit.rebuild import RESTORED, records_of, restart
from nri_resmgr.policy.kit.records import LAYOUT, PlacementRecord
from nri_resmgr.runtime.pipeline import Pipeline
from nri_resmgr.runtime.record_store import RECORD_FILE, RecordStore
from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.load import load_topology
from nri_resmgr.topology.model import Topology
from tests.support.balloons import bctr, machine, policy, run
from tests.support.builders import topo
from tests.support.logs import QUIET
from tests.support.pipeline import container, sandbox
from tests.support.restart_rule import (
    assert_restart_exact,
    reports_of,
    through_the_file,
    unexplained_moves,
)
from tests.unit.resmgr.balloons.test_props import CONFIGS, HIDDEN

#: configurations that fit any machine of 8 CPUs or more (quantities, no device paths)
ANYWHERE: dict[str, dict[str, Any]] = {
    "composites": CONFIGS[2],
    "hidden": HIDDEN,
    "levels": {
        "reservedResources": {"cpu": "2"},
        "reservedPoolNamespaces": ["sys"],
        "preferSpreadOnPhysicalCores": True,
        "preserve": {"matchExpressions": [{"key": "pod/name", "operator": "In",
                                           "values": ["p3"]}]},
        "balloonTypes": [
            {"name": "full", "minBalloons": 2, "minCPUs": 1, "maxCPUs": 4,
             "shareIdleCPUsInSame": "l2cache", "namespaces": ["full"]},
            {"name": "new", "preferNewBalloons": True, "maxBalloons": 3,
             "shareIdleCPUsInSame": "package", "namespaces": ["new"]},
            {"name": "grp", "groupBy": "${pod/labels/app}", "shareIdleCPUsInSame": "die",
             "hideHyperthreads": True, "namespaces": ["grp"]},
            {"name": "duo", "components": [{"balloonType": "full"}, {"balloonType": "new"}],
             "minBalloons": 1, "namespaces": ["other"]},
            {"name": "default", "shareIdleCPUsInSame": "core", "minCPUs": 1,
             "memoryTypes": ["DRAM"]},
        ],
    },
    "balance": {
        "reservedResources": {"cpu": "1"},
        "pinMemory": False,
        "balloonTypes": [
            {"name": "reserved", "minCPUs": 1},
            {"name": "left", "minCPUs": 1, "namespaces": ["full"]},
            {"name": "right", "minCPUs": 1, "preferSpreadOnPhysicalCores": True},
            {"name": "either", "components": [{"balloonType": "left"},
                                              {"balloonType": "right"}],
             "componentCreation": "balance-balloons", "minBalloons": 2,
             "preferNewBalloons": True, "namespaces": ["new", "other"]},
            {"name": "default", "shareIdleCPUsInSame": "numa", "pinMemory": True},
        ],
    },
}  # fmt: skip
#: the configurations of the balloons property tests, which assume the test machine
ON_TEST_MACHINE = {**ANYWHERE, "devices": CONFIGS[0], "cpuset": CONFIGS[1]}

SHIPPED = ["two-socket", "hybrid-desktop", "chiplet-l3", "hbm-server", "pmem-server"]
#: the 224-thread machine only in the long run (its CPU tree makes each step slow)
LONG_ONLY = ["server-2s-224t"]
EXAMPLES = int(os.environ.get("NRI_RESMGR_RESTART_EXAMPLES", "25"))
LONG = EXAMPLES > 100

NAMESPACES = ["full", "new", "grp", "other", "sys", "kube-system", "default"]
ANNOTATIONS: list[dict[str, str]] = [
    {}, {}, {}, {BALLOON_ANNOTATION: "full"}, {BALLOON_ANNOTATION: "nosuch"},
    {HIDE_HYPERTHREADS: "true"}, {HIDE_HYPERTHREADS: "false"}, {CPU_PRESERVE: "true"},
    {MEMORY_TYPE: "hbm"}, {MEMORY_TYPE: "dram,pmem"},
]  # fmt: skip
MILLI = [0, 100, 500, 1000, 1500, 2500]

#: one step: create slot (namespace, millicores, app label, annotations), delete slot,
#: update slot's request, or replace the configuration by another one of the case's
OPS = st.one_of(
    st.tuples(
        st.just("create"),
        st.integers(0, 9),
        st.sampled_from(NAMESPACES),
        st.sampled_from(MILLI),
        st.integers(0, 2),
        st.integers(0, len(ANNOTATIONS) - 1),
    ),
    st.tuples(st.just("delete"), st.integers(0, 9)),
    st.tuples(st.just("update"), st.integers(0, 9), st.sampled_from(MILLI)),
    st.tuples(st.just("reconfigure"), st.integers(0, 99)),
)


def _container(slot: int, ns: str, milli: int, app: int, ann: int) -> ContainerInfo:
    return bctr(
        f"c{slot}",
        pod=f"p{slot // 2}",
        ns=ns,
        milli=milli,
        labels={"app": f"a{app}"},
        ann=ANNOTATIONS[ann],
    )


def history(
    t: Topology, configs: dict[str, dict[str, Any]], first: str, data: st.DataObject
) -> tuple[BalloonsPolicy, BalloonsState, dict[ContainerID, ContainerInfo]]:
    """A state reached by decisions (module docstring), its policy and containers."""
    p = policy(configs[first], t)
    state = p.initial_state()
    live: dict[ContainerID, ContainerInfo] = {}
    names = sorted(configs)
    for op in data.draw(st.lists(OPS, max_size=24), "steps"):
        if op[0] == "reconfigure":
            try:  # a configuration without an initial state is refused
                q = policy(configs[names[op[1] % len(names)]], t)
                q.initial_state()
                d = q.rebuild(reports_of(p, state, list(live.values())))
            except ResmgrError:
                continue
            if violations(q.sizing, d.state):
                # a machine too small for the new configuration's balloons around the
                # containers already there (noticed, not this test's subject)
                event("reconfiguration: the rebuild breaks an invariant")
                continue
            p, state = q, d.state
            # the containers it could not place are removed (so the runtime would
            # report them where they were, which no record names)
            live = {
                cid: c
                for cid, c in live.items()
                if cid in state.members or p.preserved(c) is not None
            }
            continue
        if op[0] == "create":
            c = _container(*op[1:])
            if c.id in live:
                continue
            try:
                state = p.allocate(state, c).state
            except ResmgrError:
                continue
            live[c.id] = c
        else:
            cid = ContainerID(f"p{op[1] // 2}-c{op[1]}")
            if cid not in live:
                continue
            if op[0] == "delete":
                state = p.release(state, cid).state
                del live[cid]
            else:
                c = live[cid]
                c = replace(c, request=replace(c.request, cpu_request_milli=op[2]))
                try:
                    state = p.update(state, c).state
                except ResmgrError:
                    continue
                live[cid] = c
        p.check(state)
    return p, state, live


def check_restarts(
    p: BalloonsPolicy, state: BalloonsState, live: dict[ContainerID, ContainerInfo]
) -> None:
    """Exact with records, twice; without them the restart rule holds and every move
    has its cause stated (module docstring), and what the rebuild guesses is counted."""
    assert_restart_exact(p, state, list(live.values()))
    lost = p.rebuild(reports_of(p, state, list(live.values())))
    assert unexplained_moves(lost) == [], lost.reason
    if lost.updates:
        event("rebuild without records: moves a container, with its cause")
    else:
        same = "the same state" if lost.state == state else "another state, nobody moved"
        event(f"rebuild without records: {same}")
    event(f"composite balloons: {min(3, sum(bool(b.components) for b in state.balloons.values()))}")


CASES = [
    *[("test-machine", name) for name in ON_TEST_MACHINE],
    *[(m, name) for m in SHIPPED for name in ANYWHERE],
    *[(m, name) for m in LONG_ONLY for name in ANYWHERE if LONG],
]


@pytest.mark.parametrize(("machine_name", "config"), CASES)
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_restart_with_records_is_exact(machine_name: str, config: str, data: st.DataObject) -> None:
    t = machine() if machine_name == "test-machine" else load_topology(machine_name)
    configs = ON_TEST_MACHINE if machine_name == "test-machine" else ANYWHERE
    check_restarts(*history(t, configs, config, data))


#: random machines: 1-2 packages of 1-2 nodes, 2-4 cores of 1-2 threads
RANDOM_MACHINES = st.builds(
    lambda packages, nodes, cores, threads: topo(
        packages=packages, nodes=nodes, cores=cores, threads=threads, memory="2G"
    ),
    packages=st.integers(1, 2),
    nodes=st.integers(1, 2),
    cores=st.integers(2, 4),
    threads=st.integers(1, 2),
)


@pytest.mark.parametrize("config", sorted(ANYWHERE))
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(t=RANDOM_MACHINES, data=st.data())
def test_restart_with_records_is_exact_on_random_machines(
    config: str, t: Topology, data: st.DataObject
) -> None:
    try:
        policy(ANYWHERE[config], t).initial_state()
    except ResmgrError:
        event("configuration does not fit the machine")
        return
    check_restarts(*history(t, ANYWHERE, config, data))


# ---- targeted cases --------------------------------------------------------------------


def _records(p: BalloonsPolicy, state: BalloonsState) -> dict[ContainerID, PlacementRecord]:
    return through_the_file(records_of(p, state, p.render(state)))


def test_a_balance_balloons_composite_keeps_its_component() -> None:
    """Issue 24's named case.  Two ``either`` composites (``balance-balloons`` of two
    one-CPU types) are there from the start, ``left`` on 16 and ``right`` on 1; c0 and
    c1 join them and c0 goes.  The rebuild without records moves nobody but cannot
    tell which component c1's composite had: it makes c1's ``either[0]`` of ``left`` on
    1 and the empty one ``right`` on 2, not 16.  With the records the state comes back
    as it was, twice."""
    p = policy(ANYWHERE["balance"])
    c0, c1 = bctr("c0", pod="p0", ns="new"), bctr("c1", pod="p1", ns="new")
    st = p.release(run(p, c0, c1), c0.id).state
    assert st.members[c1.id].balloon == "either[1]"
    assert [
        (b.name, [x.type for x in b.components], str(b.cpus)) for b in st.of_type("either")
    ] == [
        ("either[0]", ["left"], "16"),
        ("either[1]", ["right"], "1"),
    ]
    reports = reports_of(p, st, [c1])
    guessed = p.rebuild(reports)
    assert guessed.updates == ()
    assert guessed.state != st, "the rebuild tells this case now: pick another"
    assert_restart_exact(p, st, [c1])
    d = restart(p, reports, _records(p, st))
    assert (d.reason, d.state.balloons["either[1]"].components[0].type) == (RESTORED, "right")


def test_the_balloons_no_container_is_in_come_back_where_they_were() -> None:
    """After containers come and go, the reserved balloon and the ``minBalloons`` ones
    are not where a fresh start puts them; with no container left, the layout alone
    restores them (a rebuild would make the initial state)."""
    p = policy(CONFIGS[1])
    asks = [("full", 2500), ("kube-system", 1500), ("full", 1000)]
    cs = [bctr(f"c{i}", pod=f"p{i}", ns=ns, milli=m) for i, (ns, m) in enumerate(asks)]
    st = run(p, *cs)
    for c in cs:
        st = p.release(st, c.id).state
    assert st != p.initial_state(), "the balloons moved: pick another history"
    d = restart(p, [], _records(p, st))
    assert (d.reason, d.state, d.updates) == (RESTORED, st, ())
    assert list(d.state.balloons) == list(st.balloons)


def test_a_container_gone_while_down_sends_its_balloon_through_the_rebuild() -> None:
    """The layout counts each balloon's containers: one that went away while the daemon
    was down leaves its balloon sized for it, so the records are not used and the
    rebuild resizes it, with the cause in the reason."""
    p = policy(CONFIGS[0])
    a = bctr("a", pod="a", ns="full", milli=1500)
    b = bctr("b", pod="b", ns="full", milli=1500)
    st = run(p, a, b)
    assert st.members[a.id].balloon == st.members[b.id].balloon
    d = restart(p, reports_of(p, st, [b]), _records(p, st))
    assert "records not used" in d.reason and "held 2 container(s); 1 reported" in d.reason
    p.check(d.state)


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("b1.type", "nosuch", "balloon type 'nosuch'"),
        ("b1.instance", -1, "instance -1"),
        ("b1.cpus", "x", "b1.cpus"),
        ("b1.extra", 1, "unexpected record fields"),
        ("balloons", "2", "expected a int"),
    ],
)
def test_a_layout_that_cannot_be_read_is_not_used(field: str, value: object, expected: str) -> None:
    p = policy(CONFIGS[0])
    c = bctr("a", pod="a", ns="full", milli=1500)
    st = run(p, c)
    records = _records(p, st)
    layout = records[LAYOUT]
    records[LAYOUT] = replace(layout, meaning={**layout.meaning, field: value})  # type: ignore[dict-item]
    d = restart(p, reports_of(p, st, [c]), records)
    assert "records not used" in d.reason and expected in d.reason, d.reason


def test_a_record_naming_a_balloon_the_layout_lacks_is_not_used() -> None:
    p = policy(CONFIGS[0])
    c = bctr("a", pod="a", ns="full", milli=1500)
    st = run(p, c)
    records = _records(p, st)
    mine = records[c.id]
    records[c.id] = replace(mine, meaning={**mine.meaning, "instance": 7})
    d = restart(p, reports_of(p, st, [c]), records)
    assert "recorded in balloon full[7]; the layout has no such" in d.reason, d.reason


def test_a_balloon_keeps_sharing_idle_cpus_beyond_its_domains() -> None:
    """Found by the property above (records lost): ``full[0]`` shared 18 (of the core of
    2, its CPU then) and deflated to 17; a balloon keeps what it shares until another
    takes it, so c0 runs on 17-18.  The rebuild shared only the idle CPUs of 17's
    domains and moved c0 to 17; it now keeps the idle CPUs a balloon's containers show."""
    p = policy(ON_TEST_MACHINE["hidden"])
    c0 = bctr("c0", pod="p0", ns="full", labels={"app": "a0"})
    c1 = bctr("c1", pod="p0", ns="full", milli=1500, labels={"app": "a0"})
    st = run(p, c0, c1)
    q = policy(ON_TEST_MACHINE["levels"])
    st = q.release(q.rebuild(reports_of(p, st, [c0, c1])).state, c1.id).state
    b = st.balloons[st.members[c0.id].balloon]
    assert (str(b.cpus), str(b.shared)) == ("17", "18")
    d = q.rebuild(reports_of(q, st, [c0]))
    assert (d.updates, d.state) == ((), st)


def test_pipeline_keeps_balloons_records_and_a_new_pipeline_moves_nothing(
    tmp_path: Path,
) -> None:
    """Each commit keeps the records of the containers it changed and the layout; a
    new pipeline given the runtime's report restores the state and moves nothing."""
    config = CONFIGS[1]

    def pipeline() -> Pipeline:
        store = RecordStore(tmp_path / RECORD_FILE, scope="balloons/test", log=QUIET)
        stores.append(store)
        return Pipeline(policy(config), log=QUIET, record_store=store)

    stores: list[RecordStore] = []
    first = pipeline()
    db, web = sandbox("db"), sandbox("web", guaranteed=False)
    made = []
    for pod, name, cpu, limit in [(db, "a", "2", "2"), (web, "w", "500m", None),
                                  (db, "b", "1", "1"), (web, "v", "1500m", None)]:  # fmt: skip
        c = container(pod, name, cpu=cpu, limit=limit)
        first.create(pod, c)
        made.append(c)
    first.remove(db, made[0])
    first.remove(web, made[3])
    made = made[1:3]
    kept = stores[0].load()  # (after the store's own pending write)
    assert set(kept) == {LAYOUT, *(ContainerID(c.id) for c in made)}, "the layout and the live"
    for c in made:  # the runtime reports what it was told
        a = first.assignments[ContainerID(c.id)]
        c.linux.resources.cpu.cpus = str(a.cpus)
        c.linux.resources.cpu.mems = str(a.mems)
    second = pipeline()
    assert second.synchronize([db, web], made) == []
    assert second.state == first.state
    assert isinstance(second.state, BalloonsState) and isinstance(first.state, BalloonsState)
    assert list(second.state.balloons) == list(first.state.balloons)
    assert pipeline().synchronize([db, web], made) == [], "a second restart moves nothing"


def test_what_the_daemon_never_set_matches_any_report() -> None:
    """With ``pinCPU: false`` and memory not pinned the daemon sets no cpuset and no
    memory nodes: the runtime reports what the kubelet set, and the records (empty
    sets) still count; a cpuset the daemon did set must still be reported exactly."""
    p = policy({"pinCPU": False, "pinMemory": False, **CONFIGS[0]})
    a = bctr("a", pod="a", ns="full", milli=1500)
    st = run(p, a)
    records = _records(p, st)
    assert (str(records[a.id].cpus), str(records[a.id].mems)) == ("", "")
    kubelets = replace(a, current_cpus=p.topology.online_cpus(), current_mems=IDSet.parse("0-1"))
    d = restart(p, [kubelets], records)
    assert (d.reason, d.updates, d.state) == (RESTORED, (), st)
    pinned = policy(CONFIGS[0])
    st = run(pinned, a)
    d = restart(pinned, [kubelets], _records(pinned, st))
    assert "differ from the report" in d.reason, d.reason


def test_without_records_a_composite_whose_component_type_is_full_is_made_again() -> None:
    """Found by the long run, on the 16-CPU hybrid desktop: three containers in
    ``either`` balloons (``balance``), then the configuration becomes ``levels``, whose
    rebuild makes ``duo[0]`` (components ``full`` and ``new``, ``minBalloons: 1``) before
    it places the three as new in ``new`` balloons up to their ``maxBalloons: 3``.  A
    rebuild from that state without records claims the three ``new`` balloons first and
    then could not make ``duo[0]``: its ``new`` component would be a fourth.  It now
    makes such composites first, without CPUs (`rebuild.slots`).  With the records the
    state comes back whole."""
    t = load_topology("hybrid-desktop")
    p = policy(ANYWHERE["balance"], t)
    cs = [bctr(f"c{i}", pod=f"p{i}", ns="new") for i in range(3)]
    st = run(p, *cs)
    q = policy(ANYWHERE["levels"], t)
    st = q.rebuild(reports_of(p, st, cs)).state
    q.check(st)
    assert len(st.of_type("new")) == 3 and len(st.of_type("duo")) == 1
    d = restart(q, reports_of(q, st, cs), _records(q, st))
    assert (d.reason, d.state) == (RESTORED, st)
    lost = q.rebuild(reports_of(q, st, cs))
    assert violations(q.sizing, lost.state) == []
