"""Hostile ``affinity`` / ``anti-affinity`` annotations (`policy.topology_aware.affinity`).

Every value a pod author can write must end in rules or in an `AnnotationError` that names
the container, the annotation, what was expected and what was found (cut to a prefix);
never another exception, never a parse or a decision whose cost has no bound.
"""

from __future__ import annotations

import fnmatch

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nri_resmgr.model import AnnotationError, QoSClass
from nri_resmgr.policy.topology_aware import TopologyAwarePolicy
from nri_resmgr.policy.topology_aware.affinity import (
    AFFINITY,
    AFFINITY_ALIASES,
    ANTI_AFFINITY,
    MAX_TERMS,
    WEIGHT_CUTOFF,
    Affinity,
    container_affinities,
)
from tests.support.builders import ctr, small, topo
from tests.support.hostile import reader_work_bound
from tests.support.work import counting_calls


def rules_of(text: str, key: str = AFFINITY) -> tuple[Affinity, ...]:
    c = ctr("c0", pod="p", milli=1000, ann={key: text})
    return container_affinities(c, colocate_pods=False, colocate_namespaces=False)


def rule(values: str, op: str = "In", extra: str = "") -> str:
    return "{match: {key: name, operator: " + op + ", values: " + values + "}" + extra + "}"


def bomb(n: int) -> str:
    """A few KB whose aliases repeat to n**3 values ("billion laughs")."""
    a = "&a [" + ",".join(["x"] * n) + "]"
    b = "&b [" + ",".join(["*a"] * n) + "]"
    c = "[" + ",".join(["*b"] * n) + "]"
    return f"c0: [{rule(a)}, {rule(b)}, {rule(c)}]"


CASES = {
    "deep-list": "[" * 5000,
    "deep-map": "{a: " * 2000,
    "int-field": f"c0: [{rule('[a]', extra=', 1: 2')}]",
    "huge-weight": f"c0: [{rule('[a]', extra=', weight: ' + '1' * 5000)}]",
    "huge-name": "c0: [ " + "1" * 5000 + " ]",
    "alias-bomb": bomb(1000),
    "values-100k": f"c0: [{rule('[' + ','.join(f'v{i}' for i in range(100_000)) + ']')}]",
    "simple-50k": "c0: [" + ",".join(f"o{i}" for i in range(50_000)) + "]",
    "many-rules": "c0: [" + ", ".join([rule("[a]")] * (MAX_TERMS + 1)) + "]",
    "long-operator": f"c0: [{rule('[a]', op='X' * 100_000)}]",
    "long-key": "c0: [{match: {key: " + "k" * 100_000 + ", operator: Exists}}]",
    "two-documents": "c0: [a]\n---\nc0: [b]\n",
    "python-tag": "c0: !!python/object:os.system [a]",
}


@pytest.mark.parametrize("key", [AFFINITY, ANTI_AFFINITY, AFFINITY_ALIASES[AFFINITY]])
@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_values_fail_cleanly_and_quickly(case: str, key: str) -> None:
    """Refused with a clear error, within a reader's work bound (calls linear in the
    value's size: `tests.support.hostile.reader_work_bound`, counted, not timed)."""
    with (
        counting_calls(limit=reader_work_bound(CASES[case]), what=case),
        pytest.raises(AnnotationError) as err,
    ):
        rules_of(CASES[case], key)
    text = str(err.value)
    assert text.startswith("pod default/p container c0: annotation"), text
    assert "expected" in text, text
    assert len(text) < 1000, f"{len(text)} characters: {text[:300]}"


def test_weights_out_of_range_are_clamped_not_refused() -> None:
    got = rules_of(f"c0: [{rule('[a]', extra=', weight: 99999999')}]")
    assert [r.weight for r in got] == [WEIGHT_CUTOFF]
    got = rules_of(f"c0: [{rule('[a]', extra=', weight: -99999999')}]", ANTI_AFFINITY)
    assert [r.weight for r in got] == [WEIGHT_CUTOFF]


def test_the_bound_counts_the_terms_of_one_container_only() -> None:
    """A pod may hold many containers' rules; each container's own are bounded."""
    per = MAX_TERMS // 2
    vals = "[" + ",".join(f"v{i}" for i in range(per)) + "]"
    text = "\n".join(f"c{i}: [{rule(vals)}]" for i in range(8))
    assert sum(len(r.match.values) for r in rules_of(text)) == per


_word = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=12)
_scalar = st.one_of(_word, st.integers(-(2**70), 2**70), st.floats(), st.booleans(), st.none())
_expr = st.fixed_dictionaries(
    {},
    optional={
        "key": st.sampled_from(["name", "pod/labels/app", ":name:namespace", "", "labels/"])
        | _word,
        "operator": st.sampled_from(["In", "NotIn", "Equals", "MatchesAny", "AlwaysTrue"]) | _word,
        "values": st.lists(_scalar, max_size=5) | _scalar,
    },
)
_rule = st.fixed_dictionaries(
    {}, optional={"scope": _expr | _scalar, "match": _expr | _scalar, "weight": _scalar}
)
_doc = st.dictionaries(
    st.sampled_from(["c0", "c1"]) | _scalar,
    st.lists(_rule | _scalar, max_size=4) | _scalar | _rule,
    max_size=3,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=_doc, anti=st.booleans())
def test_any_document_gives_rules_or_a_clean_error(doc: object, anti: bool) -> None:
    import json

    try:
        text = json.dumps(doc)
    except ValueError:  # NaN etc.: JSON is YAML, so write them as YAML does
        text = repr(doc)
    try:
        got = rules_of(text, ANTI_AFFINITY if anti else AFFINITY)
    except AnnotationError as exc:
        assert str(exc).startswith("pod default/p container c0: annotation")
        return
    for r in got:
        assert -WEIGHT_CUTOFF <= r.weight <= WEIGHT_CUTOFF
        assert (r.weight < 0) == anti


def test_a_decision_among_1000_containers_with_rules_is_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The cost of a decision is (live containers) x (terms of the new container's rules):
    with the most terms allowed among 1,000 live containers with rules, the decision
    matches at most that many patterns (it took 3.8 s with 10,000 patterns before the
    bound).  Counted, not timed: a wall-clock limit fails on a loaded machine."""
    p = TopologyAwarePolicy(topology=topo(packages=2, nodes=2, cores=16, threads=2), config={})
    s = p.initial_state()
    mine = {AFFINITY: "c: [{match: {key: pod/name, operator: In, values: [x1, x2]}, weight: 5}]"}
    live = 1000
    for i in range(live):
        c = ctr("c", pod=f"p{i}", milli=10, qos=QoSClass.BURSTABLE, limit=100, ann=mine)
        s = p.allocate(s, c).state
    vals = "[" + ",".join(f"x{i}*" for i in range(MAX_TERMS - 1)) + "]"
    big = (
        "c: [{scope: {key: namespace, operator: Exists}, "
        f"match: {{key: pod/name, operator: MatchesAny, values: {vals}}}}}]"
    )
    c = ctr("c", pod="big", milli=10, qos=QoSClass.BURSTABLE, limit=100, ann={AFFINITY: big})
    matched = 0
    real = fnmatch.fnmatchcase

    def counting(name: str, pattern: str) -> bool:
        nonlocal matched
        matched += 1
        return real(name, pattern)

    monkeypatch.setattr(fnmatch, "fnmatchcase", counting)
    d = p.allocate(s, c)
    assert d.assignment is not None
    assert 0 < matched <= (live + 1) * MAX_TERMS, matched


def test_the_small_machine_still_places_a_pair_by_affinity() -> None:
    p = TopologyAwarePolicy(topology=small(), config={})
    s = p.initial_state()
    ann = {AFFINITY: "a: [b]"}
    da = p.allocate(s, ctr("a", pod="q", milli=1000, ann=ann))
    db = p.allocate(da.state, ctr("b", pod="q", milli=1000, ann=ann))
    assert da.assignment is not None and db.assignment is not None
    assert da.assignment.pool == db.assignment.pool
