"""The subject index weighs affinity rules against exactly the containers a scan would.

`scoring.affinity_by_pool` looks the containers a rule can match up in the supply's
subject index (`state.Supply.subjects`, `expressions.Expression.lookup_terms`) instead of
testing every container.  For random containers (names, namespaces, pods, labels drawn
from small pools so that rules hit several) and random rules (every operator, keys the
index holds and keys it does not, the ``*`` value), the scores must equal those of the
plain scan over every grant, and the index kept grant by grant must equal the one derived
from scratch after releases too.
"""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from immutables import Map

from nri_resmgr.model import ContainerID, QoSClass
from nri_resmgr.policy.expressions import Operator, Subject
from nri_resmgr.policy.topology_aware import TopologyAwarePolicy, TopologyAwareState
from nri_resmgr.policy.topology_aware.affinity import AFFINITY, diluted_scores, pool_weights
from nri_resmgr.policy.topology_aware.preferences import ContainerRequest, container_request
from nri_resmgr.policy.topology_aware.scoring import affinity_by_pool, affinity_candidates
from nri_resmgr.policy.topology_aware.state import Grant, supply_from_scratch
from nri_resmgr.topology.cpuset import IDSet
from tests.support.builders import ctr, small

NAMES = ["a", "b", "c"]
NAMESPACES = ["default", "data"]
PODS = ["p0", "p1", "p2", "p3"]
KEYS = ["name", "namespace", "pod/name", "pod/namespace", "qosclass", "id", "pod/uid",
        "/namespace/", ":name:namespace", "labels/x"]  # fmt: skip
OPERATORS = [Operator.EQUALS, Operator.IN, Operator.NOT_IN, Operator.EXISTS, Operator.MATCHES]
VALUES = [*NAMES, *NAMESPACES, *PODS, "*", "a*", "Guaranteed"]

members = st.lists(
    st.tuples(st.sampled_from(NAMES), st.sampled_from(NAMESPACES), st.sampled_from(PODS)),
    max_size=12,
)


@st.composite
def expressions(draw: st.DrawFn) -> dict[str, object]:
    op = draw(st.sampled_from(OPERATORS))
    if op is Operator.EXISTS:
        values: list[str] = []
    elif op in (Operator.EQUALS, Operator.MATCHES):
        values = [draw(st.sampled_from(VALUES))]
    else:
        values = draw(st.lists(st.sampled_from(VALUES), min_size=1, max_size=3))
    return {"key": draw(st.sampled_from(KEYS)), "operator": str(op), "values": values}


rules = st.lists(
    st.fixed_dictionaries(
        {"match": expressions()},
        optional={"scope": expressions(), "weight": st.integers(-3, 3)},
    ),
    min_size=1,
    max_size=3,
)


def scanned(
    state: TopologyAwareState, p: TopologyAwarePolicy, cid: ContainerID, req: ContainerRequest
) -> dict[int, float]:
    """The plain scan: every grant weighed."""
    others = ((g.container_id, g.pool, g.request.subject) for g in state.grants.values())
    return diluted_scores(p.tree, pool_weights(req.affinities, others, self_id=cid))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(live=members, released=st.sets(st.integers(0, 11)), rule=rules, pod=st.sampled_from(PODS))
def test_indexed_affinity_equals_the_scan(
    live: list[tuple[str, str, str]],
    released: set[int],
    rule: list[dict[str, object]],
    pod: str,
) -> None:
    p = TopologyAwarePolicy(topology=small(), config={})
    s = p.initial_state()
    pools = [q.index for q in p.tree.pools]
    for i, (name, ns, pod_name) in enumerate(live):
        c = ctr(name, pod=pod_name, ns=ns, milli=100, cid=f"c{i}")
        req = container_request(c, p.config)
        s = s.with_grant(
            Grant(
                container_id=c.id,
                pod_id=c.pod.id,
                namespace=c.namespace,
                pool=pools[i % len(pools)],
                kind=req.kind,
                exclusive=IDSet(),
                request=req,
            )
        )
    for i in released:
        s = s.without(ContainerID(f"c{i}"))
    assert s.supply.subjects == supply_from_scratch(p.tree, s.grants.values()).subjects
    newcomer = ctr("probe", pod=pod, milli=100, ann={AFFINITY: json.dumps({"probe": rule})})
    req = container_request(newcomer, p.config)
    assert req.affinities
    got = affinity_by_pool(s, p.tree, container_id=newcomer.id, request=req)
    assert got == scanned(s, p, newcomer.id, req)


def test_an_equals_rule_on_a_name_weighs_only_the_containers_with_it() -> None:
    """The index is used (not just equal): a rule on ``name`` picks its holders only."""
    p = TopologyAwarePolicy(topology=small(), config={})
    s = p.initial_state()
    for i, name in enumerate(["db", "db", "cache", "web", "web", "web"]):
        s = p.allocate(s, ctr(name, pod=f"p{i}", milli=100, cid=f"c{i}")).state
    rule = [{"scope": {"key": "namespace", "operator": "Equals", "values": ["default"]},
             "match": {"key": "name", "operator": "In", "values": ["db", "cache"]}}]  # fmt: skip
    req = container_request(
        ctr("probe", pod="x", milli=100, ann={AFFINITY: json.dumps({"probe": rule})}), p.config
    )
    assert affinity_candidates(s, req) == {ContainerID("c0"), ContainerID("c1"), ContainerID("c2")}
    not_indexed = [{"match": {"key": "name", "operator": "NotIn", "values": ["db"]}}]
    req = container_request(
        ctr("probe", pod="x", milli=100, ann={AFFINITY: json.dumps({"probe": not_indexed})}),
        p.config,
    )
    # the default scope (the pod's containers, by pod/name) answers through the index
    assert affinity_candidates(s, req) == set()


def test_the_pods_namespace_and_qos_class_are_looked_up_under_the_containers() -> None:
    """``pod/namespace`` and ``pod/qosclass`` always have the values of ``namespace`` and
    ``qosclass``: the index keeps the latter only, and a rule on either key finds the
    same containers as the scan."""
    p = TopologyAwarePolicy(topology=small(), config={})
    s = p.initial_state()
    for i, (ns, qos) in enumerate(
        [
            ("default", QoSClass.BURSTABLE),
            ("data", QoSClass.BURSTABLE),
            ("default", QoSClass.BEST_EFFORT),
        ]
    ):
        s = p.allocate(s, ctr("a", pod="p0", ns=ns, qos=qos, milli=100, cid=f"c{i}")).state
    assert not any(k in ("pod/namespace", "pod/qosclass") for k, _ in s.supply.subjects)
    for key, value, holders in [
        ("pod/namespace", "default", {"c0", "c2"}),
        ("namespace", "default", {"c0", "c2"}),
        ("pod/qosclass", "BestEffort", {"c2"}),
        ("qosclass", "BestEffort", {"c2"}),
    ]:
        rule = [{"scope": {"key": "pod/name", "operator": "In", "values": ["p0", "p1"]},
                 "match": {"key": key, "operator": "Equals", "values": [value]}}]  # fmt: skip
        probe = ctr("probe", pod="p1", milli=100, ann={AFFINITY: json.dumps({"probe": rule})})
        req = container_request(probe, p.config)
        assert affinity_candidates(s, req) == {ContainerID(c) for c in holders}
        got = affinity_by_pool(s, p.tree, container_id=probe.id, request=req)
        assert got and got == scanned(s, p, probe.id, req)


def test_an_index_entry_of_one_holder_is_its_id_alone() -> None:
    """An item held by one grant is a 1-tuple of its id, by more a map of them, and back
    to the 1-tuple when one is left (`state.Holding`: rss-1000), kept and derived alike."""
    p = TopologyAwarePolicy(topology=small(), config={})
    s = p.initial_state()
    for i, pod in enumerate(["p0", "p1", "p1"]):
        s = p.allocate(s, ctr("web", pod=pod, milli=100, cid=f"c{i}")).state
    subjects = s.supply.subjects
    assert subjects[("pod/name", "p0")] == (ContainerID("c0"),)
    assert subjects[("pod/name", "p1")] == Map({ContainerID("c1"): None, ContainerID("c2"): None})
    s = p.release(s, ContainerID("c1")).state
    assert s.supply.subjects[("pod/name", "p1")] == (ContainerID("c2"),)
    s = p.release(s, ContainerID("c0")).state
    assert ("pod/name", "p0") not in s.supply.subjects
    assert s.supply.subjects == supply_from_scratch(p.tree, s.grants.values()).subjects


def test_every_subject_holds_one_string_per_label_key() -> None:
    # the index is kept per live container; its label keys are interned (rss-1000)
    def subject(cid: str, value: str) -> Subject:
        label = "".join(["ap", "p"])  # a new string object per subject, as protobuf gives
        return Subject(
            id=cid, name="c", namespace="ns", qos_class="Burstable", pod_id=f"p-{cid}",
            pod_uid=f"u-{cid}", pod_name=f"p-{cid}", pod_labels=((label, value),),
        )  # fmt: skip

    keys = [
        next(k for k, _ in subject(cid, value).grouping() if k.startswith("pod/labels/"))
        for cid, value in (("a", "x"), ("b", "y"))
    ]
    assert keys == ["pod/labels/app", "pod/labels/app"]
    assert keys[0] is keys[1]
