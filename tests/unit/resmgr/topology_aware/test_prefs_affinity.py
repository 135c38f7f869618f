"""Affinity and anti-affinity annotations in topology-aware (nri-plugins' semantics).

The machine is nri-plugins' n4c16 in our numbering (see `test_prefs_priority`):
node0 = 0-1,8-9 (CPU 0 reserved), node1 = 2-3,10-11, node2 = 4-5,12-13,
node3 = 6-7,14-15.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nri_resmgr.model import AllocationError, AnnotationError, ContainerID, ContainerInfo, QoSClass
from nri_resmgr.policy.topology_aware import TopologyAwarePolicy, TopologyAwareState
from nri_resmgr.policy.topology_aware.affinity import (
    AFFINITY,
    ANTI_AFFINITY,
    Affinity,
    Expression,
    Operator,
    container_affinities,
    subject_of,
)
from nri_resmgr.policy.topology_aware.offers import Offer
from nri_resmgr.policy.topology_aware.preferences import container_request
from nri_resmgr.topology.synthetic import build_topology
from tests.support.builders import ctr, small, with_current
from tests.support.topology_aware import plain_offer


def node_of(p: TopologyAwarePolicy, s: TopologyAwareState, name: str, pod: str) -> str:
    return p.tree.pools[s.grants[ContainerID(f"{pod}-{name}")].pool].name


def run_pod(
    pod: str,
    count: int,
    ann: dict[str, str],
    *,
    milli: int = 1000,
    config: dict[str, object] | None = None,
    qos: QoSClass = QoSClass.GUARANTEED,
) -> tuple[TopologyAwarePolicy, TopologyAwareState, dict[str, str]]:
    p = TopologyAwarePolicy(topology=small(), config=config or {})
    s = p.initial_state()
    pools: dict[str, str] = {}
    for i in range(count):
        c = ctr(f"{pod}c{i}", pod=pod, milli=milli, ann=ann, qos=qos)
        d = p.allocate(s, c)
        s = d.state
        p.check(s)
        assert d.assignment is not None
        pools[c.name] = d.assignment.pool
    return p, s, pools


def test_no_affinities_spread_over_nodes() -> None:
    """n4c16/test03-simple-affinity, pod0."""
    _, _, got = run_pod("pod0", 4, {})
    assert got == {"pod0c0": "node1", "pod0c1": "node2", "pod0c2": "node3", "pod0c3": "node0"}


def test_simple_affinity_colocates_pairs() -> None:
    """n4c16/test03-simple-affinity, pod1: affinities [0,1], [2,3]."""
    ann = {AFFINITY: "pod1c0: [ pod1c1 ]\npod1c2: [ pod1c3 ]\n"}
    _, _, got = run_pod("pod1", 4, ann)
    assert got["pod1c0"] == got["pod1c1"] == "node1"
    assert got["pod1c2"] == got["pod1c3"] == "node2"


def test_simple_anti_affinity_keeps_containers_apart() -> None:
    """n4c16/test03-simple-affinity, pod2: anti-affinities 4:[0,1,2], 5:[0,2,3]."""
    ann = {ANTI_AFFINITY: "pod2c4: [ pod2c0, pod2c1, pod2c2 ]\npod2c5: [ pod2c0, pod2c2, pod2c3 ]"}
    _, _, got = run_pod("pod2", 6, ann)
    assert got["pod2c4"] not in {got["pod2c0"], got["pod2c1"], got["pod2c2"]}
    assert got["pod2c5"] not in {got["pod2c0"], got["pod2c2"], got["pod2c3"]}


def test_affinity_puts_burstable_containers_on_the_same_cpus() -> None:
    """n4c128/test19-cacheclusters, pod5 (the affinity part): same pool, same CPUs."""
    ann = {AFFINITY: "pod5c0: [ pod5c1 ]"}
    p, s, got = run_pod("pod5", 2, ann, milli=2000, qos=QoSClass.BURSTABLE)
    assert got["pod5c0"] == got["pod5c1"]
    r = p.render(s)
    assert r[ContainerID("pod5-pod5c0")].cpus == r[ContainerID("pod5-pod5c1")].cpus


def test_full_form_with_scope_match_and_weight() -> None:
    """A rule scoped to all pods, matching by namespace, with a weight, pulls across pods."""
    p = TopologyAwarePolicy(topology=small(), config={})
    s = p.initial_state()
    first = ctr("db", pod="db", ns="data", milli=1000)
    s = p.allocate(s, first).state
    rule = (
        "app:\n"
        "  - scope: {key: pod/name, operator: AlwaysTrue}\n"
        "    match: {key: namespace, operator: Equals, values: [data]}\n"
        "    weight: 5\n"
    )
    app = ctr("app", pod="web", milli=1000, ann={AFFINITY: rule})
    d = p.allocate(s, app)
    assert d.assignment is not None
    assert d.assignment.pool == p.tree.pools[s.grants[first.id].pool].name
    req = container_request(app, p.config)
    assert [a.weight for a in req.affinities] == [5]


def test_anti_affinity_weight_is_negated_and_clamped() -> None:
    rule = "c:\n  - match: {key: name, operator: In, values: [a, b]}\n    weight: 5000\n"
    rules = container_affinities(
        ctr("c", ann={ANTI_AFFINITY: rule}), colocate_pods=False, colocate_namespaces=False
    )
    assert [a.weight for a in rules] == [-1000]


def test_implicit_colocation_only_without_explicit_rules() -> None:
    plain = ctr("c")
    both = {"colocate_pods": True, "colocate_namespaces": True}
    assert [a.weight for a in container_affinities(plain, **both)] == [10, 10]
    explicit = ctr("c", ann={AFFINITY: "c: [ d ]"})
    assert [a.weight for a in container_affinities(explicit, **both)] == [1]


def test_anti_affinity_beats_colocate_pods() -> None:
    """Explicit rules replace the implicit pod colocation: an anti-affine sibling moves."""
    ann = {ANTI_AFFINITY: "b: [ a ]"}
    _, _, together = run_pod("p", 2, {}, config={"colocatePods": True})
    assert together["pc0"] == together["pc1"]
    p = TopologyAwarePolicy(topology=small(), config={"colocatePods": True})
    s = p.allocate(p.initial_state(), ctr("a", milli=1000, ann=ann)).state
    d = p.allocate(s, ctr("b", milli=1000, ann=ann))
    assert d.assignment is not None
    assert d.assignment.pool != p.tree.pools[s.grants[ContainerID("p-a")].pool].name


@pytest.mark.parametrize(
    ("key", "op", "values", "expect"),
    [
        ("name", Operator.EQUALS, ("c",), True),
        ("name", Operator.EQUALS, ("*",), True),
        ("name", Operator.NOT_EQUAL, ("c",), False),
        ("pod/name", Operator.IN, ("x", "p"), True),
        ("pod/labels/app", Operator.EQUALS, ("web",), True),
        ("pod/labels/tier", Operator.EXISTS, (), False),
        ("pod/labels/tier", Operator.NOT_EXIST, (), True),
        ("namespace", Operator.MATCHES, ("def*",), True),
        ("namespace", Operator.MATCHES_NONE, ("kube-*", "def*"), False),
        ("qosclass", Operator.NOT_IN, ("BestEffort",), True),
        (":pod/name:name", Operator.EQUALS, ("p:c",), True),
        (":,-pod/name,name", Operator.EQUALS, ("p-c",), True),
    ],
)
def test_expression_operators(
    key: str, op: Operator, values: tuple[str, ...], expect: bool
) -> None:
    c = ctr("c", pod="p")
    from dataclasses import replace

    c = replace(c, pod=replace(c.pod, labels={"app": "web"}))
    assert Expression(key=key, op=op, values=values).evaluate(subject_of(c)) is expect


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("c: [ {match: {key: nam, operator: Equals, values: [a]}} ]", "unknown key 'nam'"),
        ("c: [ {match: {key: name, operator: Is, values: [a]}} ]", "unknown operator 'Is'"),
        ("c: [ {match: {key: name, operator: Equals, values: [a, b]}} ]", "exactly one value"),
        ("c: [ {scope: {key: name, operator: AlwaysTrue}} ]", "match is missing"),
        ("c: [ {match: {key: name, operator: Exists}, weight: heavy} ]", "weight must be"),
        ("[c, d", "expected YAML"),
        ("- c", "expected a mapping"),
    ],
)
def test_malformed_affinity_is_an_annotation_error(value: str, message: str) -> None:
    with pytest.raises(AnnotationError, match=message) as err:
        container_affinities(
            ctr("c", ann={AFFINITY: value}), colocate_pods=False, colocate_namespaces=False
        )
    assert AFFINITY in str(err.value) and "container c" in str(err.value)


def test_one_annotation_text_is_parsed_once_and_each_pod_gets_its_own_scope() -> None:
    """The parsed rules are kept by the annotation's key and text only: the pods of a
    workload share one parse, and the default scope (the pod) is each pod's own."""
    text = "c: [ {match: {key: name, operator: Equals, values: [d]}} ]"

    def rules(pod: str) -> tuple[Affinity, ...]:
        return container_affinities(
            ctr("c", pod=pod, ann={AFFINITY: text}), colocate_pods=False, colocate_namespaces=False
        )

    (a,), (b,) = rules("web-1"), rules("web-2")
    assert a.match is b.match, "the same text must be parsed once"
    assert a.scope == Expression(key="pod/name", op=Operator.EQUALS, values=("web-1",))
    assert b.scope == Expression(key="pod/name", op=Operator.EQUALS, values=("web-2",))
    bad = "c: [ {match: {key: nam, operator: Equals, values: [a]}} ]"
    for pod in ("p1", "p2"):  # a malformed text is refused again, naming each container
        with pytest.raises(AnnotationError, match=f"{pod}.*unknown key 'nam'"):
            container_affinities(
                ctr("c", pod=pod, ann={AFFINITY: bad}), colocate_pods=False,
                colocate_namespaces=False,
            )  # fmt: skip


def test_rebuild_from_own_rendering_keeps_affine_containers_without_updates() -> None:
    ann = {AFFINITY: "pod1c0: [ pod1c1 ]", ANTI_AFFINITY: "pod1c2: [ pod1c0 ]"}
    p, s, _ = run_pod("pod1", 3, ann)
    r = p.render(s)
    reported = [
        with_current(
            ctr(f"pod1c{i}", pod="pod1", milli=1000, ann=ann),
            r[ContainerID(f"pod1-pod1c{i}")].cpus,
            r[ContainerID(f"pod1-pod1c{i}")].mems,
        )
        for i in range(3)
    ]
    assert p.rebuild(reported).updates == ()


# ---- property: anti-affinity is honoured whenever it can be ------------------------------

MACHINES = [
    {"packages": 2, "nodes": 2, "cores": 2, "threads": 2, "memory": "2G"},
    {
        "packages": 1,
        "dies": 2,
        "nodes": 1,
        "cores": 4,
        "threads": 2,
        "l3_per_die": 2,
        "memory": "2G",
    },
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    machine=st.sampled_from(MACHINES),
    placed=st.lists(
        st.tuples(st.sampled_from([0, 500, 1000, 2000]), st.booleans()), min_size=1, max_size=6
    ),
    avoid=st.sets(st.integers(0, 5), min_size=1),
    milli=st.sampled_from([0, 500, 1000, 2000]),
    weight=st.integers(1, 1000),
)
def test_anti_affinity_is_never_violated_when_a_placement_honours_it(
    machine: dict[str, object],
    placed: list[tuple[int, bool]],
    avoid: set[int],
    milli: int,
    weight: int,
) -> None:
    """A new container never lands in (or above, or below) the pool of a container it is
    anti-affine to when some pool clear of all of them can take it."""
    p = TopologyAwarePolicy(topology=build_topology(machine), config={})
    s = p.initial_state()
    live: list[ContainerInfo] = []
    for i, (m, guaranteed) in enumerate(placed):
        qos = (
            QoSClass.GUARANTEED
            if guaranteed and m
            else QoSClass.BURSTABLE
            if m
            else (QoSClass.BEST_EFFORT)
        )
        c = ctr(f"c{i}", pod="p", milli=m, qos=qos)
        try:
            s = p.allocate(s, c).state
        except AllocationError:  # a full machine just places fewer
            continue
        live.append(c)
    names = [c.name for c in live if int(c.name[1:]) in avoid]
    rule = (
        "x:\n  - match: {key: name, operator: In, values: ["
        + ", ".join(names or ["none"])
        + f"]}}\n    weight: {weight}\n"
    )
    x = ctr(
        "x",
        pod="p",
        milli=milli,
        ann={ANTI_AFFINITY: rule},
        qos=QoSClass.GUARANTEED if milli else QoSClass.BEST_EFFORT,
    )
    bad = [p.tree.pools[s.grants[c.id].pool].cpus for c in live if c.name in names]
    clear = [pool for pool in p.tree.pools if all(pool.cpus.isdisjoint(b) for b in bad)]
    req = container_request(x, p.config)
    fits = [pool for pool in clear if isinstance(plain_offer(p, s, pool, x, req), Offer)]
    if not fits:
        return
    d = p.allocate(s, x)
    p.check(d.state)
    chosen = p.tree.pools[d.state.grants[x.id].pool]
    assert all(chosen.cpus.isdisjoint(b) for b in bad), (chosen.name, names)
