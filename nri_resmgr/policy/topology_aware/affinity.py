"""Container affinity and anti-affinity: nri-plugins' annotations as a pool score.

Theory of operation: a pod annotates which of its containers want to be near (or away
from) which other containers, on the pod, not per container:

``resource-policy.nri.io/affinity`` / ``resource-policy.nri.io/anti-affinity``
    (nri-plugins' keys; ``affinity.resource-policy.nri.io`` and
    ``anti-affinity.resource-policy.nri.io``, the form of our other annotations, are
    read too and add to them) YAML, in one of two forms (nri-plugins' cache/affinity.go):

    - simple: ``{NAME: [OTHER, ...]}``: container NAME wants the pod's containers named
      OTHER, and each OTHER wants NAME back (the relation is made symmetric), weight 1
      (-1 for anti-affinity);
    - full: ``{NAME: [{scope: EXPR, match: EXPR, weight: W}, ...]}``: the containers
      `scope` selects (default: this pod's) that `match` selects attract NAME with
      weight W (default 1; for anti-affinity the weight is negated), clamped to
      +-1000.

    An expression is ``{key: KEY, operator: OP, values: [...]}``, with the keys and
    operators of `nri_resmgr.policy.expressions` (shared with the balloons policy).

Containers without explicit rules get the implicit ones nri-plugins adds:
``colocatePods`` (weight 10 towards every container of a pod of the same name) and
``colocateNamespaces`` (weight 10 towards every container of the namespace).

Every rule is evaluated against the `Subject` (name, namespace, labels, pod) of each
other container placed, and its weight is added to that container's pool
(`pool_weights`).  A pool's score (`diluted_scores`) is its own weight plus those of its
ancestors and of its subtree, each diluted by 0.75 per tree link, as nri-plugins'
``affinityScore`` does; the sort key's affinity component (`scoring`) prefers the
higher score.  So an anti-affine container pushes a new one to pools that neither hold
it nor lie above or below its pool whenever such a pool can take the request at all:
it is a preference after the isolated-CPU preference, not a hard rule.

A malformed annotation is an `AnnotationError` naming it (nri-plugins logs it and
ignores the rules).

Parsed once per annotation text: what an annotation says depends only on its key and
its text (the pod's name, the default scope, is filled in after), so `_rules_of` keeps
the last `PARSED` texts of at most `PARSED_BYTES` each by exactly that; the containers
of a pod, and the pods of a workload, which carry the same text, read the YAML once (it
was half of an affine decision's CPU time: `bench.hotspots --kind affinity`).  What is
kept is frozen values; a malformed annotation is not kept, and is refused again, naming
the container, each time.

Bounds (a decision weighs the new container's rules against every live container, so its
cost is the live containers times the rules' terms): the annotation is read by
`limits.load_annotation_yaml` (at most 256 KiB, 32 deep, `limits.MAX_YAML_VALUES`
values with aliases counted as what they repeat), and one container's rules may hold at
most `MAX_TERMS` terms (an expression counts its values, at least one).  Values quoted
in errors are cut to a prefix (`limits.shown`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache

from nri_resmgr.limits import load_annotation_yaml, shown
from nri_resmgr.model import ANNOTATION_DOMAIN, AnnotationError, ContainerID, ContainerInfo
from nri_resmgr.policy.expressions import (
    Expression,
    Operator,
    Subject,
    check_key,
    check_values,
    subject_of,
)
from nri_resmgr.policy.topology_aware.pools import PoolTree

__all__ = [
    "AFFINITY",
    "ANTI_AFFINITY",
    "MAX_TERMS",
    "Affinity",
    "Expression",
    "Operator",
    "Subject",
    "container_affinities",
    "diluted_scores",
    "pool_weights",
    "subject_of",
]

AFFINITY = f"{ANNOTATION_DOMAIN}/affinity"
ANTI_AFFINITY = f"{ANNOTATION_DOMAIN}/anti-affinity"
#: the same, spelt like our other annotations (``NAME.resource-policy.nri.io``)
AFFINITY_ALIASES = {
    AFFINITY: f"affinity.{ANNOTATION_DOMAIN}",
    ANTI_AFFINITY: f"anti-affinity.{ANNOTATION_DOMAIN}",
}
#: user weights are clamped to +- this (nri-plugins' UserWeightCutoff)
WEIGHT_CUTOFF = 1000
#: weight of the implicit colocatePods / colocateNamespaces affinities
IMPLICIT_WEIGHT = 10
#: a pool's score counts other pools' weights times DILUTION ** (tree links between them)
DILUTION = 0.75
#: the most terms (expression values, at least one per expression) one container's rules
#: may hold: a decision costs the live containers times this
MAX_TERMS = 256
#: the parsed annotation texts kept (`_rules_of`), and the longest text kept: at most
#: 4 MiB of texts however hostile (a longer one is parsed each time)
PARSED = 256
PARSED_BYTES = 16 * 1024
#: a rule as its annotation says it: (scope, None for the pod's own; match; weight)
_Said = tuple[Expression | None, Expression, int]


ALWAYS = Expression(key="", op=Operator.ALWAYS_TRUE)


@dataclass(frozen=True, slots=True)
class Affinity:
    """Containers in `scope` that `match` pull (weight > 0) or push (< 0) this one."""

    scope: Expression
    match: Expression
    weight: int

    def weight_for(self, subject: Subject) -> int:
        """This rule's weight towards `subject` (0 when it does not apply)."""
        if self.scope.evaluate(subject) and self.match.evaluate(subject):
            return self.weight
        return 0


def _pod_scope(pod_name: str) -> Expression:
    return Expression(key="pod/name", op=Operator.EQUALS, values=(pod_name,))


def _expression(raw: object, *, where: str) -> Expression:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: expected a mapping with key, operator, values")
    unknown = set(raw) - {"key", "operator", "values"}
    if unknown:
        raise ValueError(
            f"{where}: unknown field(s) {', '.join(shown(u) for u in sorted(map(str, unknown)))};"
            " expected key, operator, values"
        )
    try:
        op = Operator(str(raw.get("operator", "")))
    except ValueError:
        raise ValueError(
            f"{where}: unknown operator {shown(raw.get('operator', ''))}; expected one of "
            + ", ".join(o.value for o in Operator)
        ) from None
    values = raw.get("values") or []
    if not isinstance(values, list):
        raise ValueError(f"{where}: values: expected a list, found {shown(values)}")
    for v in values:
        if isinstance(v, Mapping | list):
            raise ValueError(f"{where}: values: expected strings, found {shown(v)}")
    check_values(op, values, where=where)
    key = str(raw.get("key", ""))
    if op is not Operator.ALWAYS_TRUE:
        check_key(key, where=where)
    return Expression(key=key, op=op, values=tuple(str(v) for v in values))


def _parse(container: ContainerInfo, key: str, sign: int) -> tuple[Affinity, ...]:
    """`container`'s rules in one annotation of its pod (and in its alias)."""
    out: list[Affinity] = []
    for k in (key, AFFINITY_ALIASES[key]):
        raw = container.pod.annotations.get(k)
        if raw is None:
            continue
        parse = _rules_of if len(raw) <= PARSED_BYTES else _rules_of.__wrapped__
        try:
            said = parse(k, raw, sign)
        except AnnotationError as exc:
            raise AnnotationError(f"{container.pretty}: {exc}") from exc
        own = _pod_scope(container.pod.name)
        out.extend(
            Affinity(scope=own if scope is None else scope, match=match, weight=weight)
            for scope, match, weight in said.get(container.name, ())
        )
    return tuple(out)


@lru_cache(maxsize=PARSED)
def _rules_of(key: str, raw: str, sign: int) -> Mapping[str, tuple[_Said, ...]]:
    """The rules annotation `key` holding `raw` says, by container name (module
    docstring: kept by exactly these); raises `AnnotationError` naming `key`."""
    doc = load_annotation_yaml(raw, where=f"annotation {key}")
    if doc is None:
        return {}
    try:
        return _rules(doc, sign)
    except ValueError as exc:
        raise AnnotationError(f"annotation {key}: {exc}") from exc


def _rules(doc: object, sign: int) -> dict[str, tuple[_Said, ...]]:
    if not isinstance(doc, Mapping):
        raise ValueError(
            f"expected a mapping of container names to lists, found {type(doc).__name__}"
        )
    out: dict[str, tuple[_Said, ...]] = {}
    simple = all(
        isinstance(v, list) and all(isinstance(x, (str, int, float)) for x in v)
        for v in doc.values()
    )
    if simple:
        # symmetric: NAME: [OTHER] also makes OTHER want NAME
        peers: dict[str, set[str]] = {}
        for name, others in doc.items():
            for other in others:
                peers.setdefault(str(name), set()).add(str(other))
                peers.setdefault(str(other), set()).add(str(name))
        for name, names in peers.items():
            op = Operator.EQUALS if len(names) == 1 else Operator.IN
            match = Expression(key="name", op=op, values=tuple(sorted(names)))
            out[name] = ((None, match, sign),)
        return out
    full: dict[str, list[_Said]] = {}
    for name, rules in doc.items():
        if not isinstance(rules, list):
            raise ValueError(
                f"container {shown(name)}: expected a list of rules, found {shown(rules)}"
            )
        for i, rule in enumerate(rules):
            where = f"container {shown(name)} rule {i}"
            if not isinstance(rule, Mapping):
                raise ValueError(
                    f"{where}: expected a mapping with scope, match, weight, found {shown(rule)}"
                )
            unknown = set(rule) - {"scope", "match", "weight"}
            if unknown:
                raise ValueError(
                    f"{where}: unknown field(s) "
                    f"{', '.join(shown(u) for u in sorted(map(str, unknown)))}; "
                    "expected scope, match, weight"
                )
            if "match" not in rule:
                raise ValueError(f"{where}: match is missing; expected a rule with a match")
            weight = rule.get("weight") or 0
            if not isinstance(weight, int):
                raise ValueError(f"{where}: weight must be an integer, found {shown(weight)}")
            weight = sign if weight == 0 else weight * sign
            weight = max(-WEIGHT_CUTOFF, min(WEIGHT_CUTOFF, weight))
            scope = (
                _expression(rule["scope"], where=f"{where} scope")
                if rule.get("scope") is not None
                else None
            )
            match = _expression(rule["match"], where=f"{where} match")
            full.setdefault(str(name), []).append((scope, match, weight))
    return {name: tuple(rules) for name, rules in full.items()}


def container_affinities(
    container: ContainerInfo, *, colocate_pods: bool, colocate_namespaces: bool
) -> tuple[Affinity, ...]:
    """`container`'s rules: its pod's annotations for its name, else the implicit ones."""
    rules = _parse(container, AFFINITY, 1) + _parse(container, ANTI_AFFINITY, -1)
    terms = sum(max(len(e.values), 1) for r in rules for e in (r.scope, r.match))
    if terms > MAX_TERMS:
        raise AnnotationError(
            f"{container.pretty}: annotations {AFFINITY}, {ANTI_AFFINITY}: expected rules of "
            f"at most {MAX_TERMS} terms (expression values) for container {container.name}, "
            f"found {terms}"
        )
    if rules:
        return rules
    implicit = []
    if colocate_pods:
        implicit.append(
            Affinity(scope=_pod_scope(container.pod.name), match=ALWAYS, weight=IMPLICIT_WEIGHT)
        )
    if colocate_namespaces:
        same_ns = Expression(key="namespace", op=Operator.EQUALS, values=(container.namespace,))
        implicit.append(Affinity(scope=ALWAYS, match=same_ns, weight=IMPLICIT_WEIGHT))
    return tuple(implicit)


def pool_weights(
    rules: Iterable[Affinity],
    others: Iterable[tuple[ContainerID, int, Subject | None]],
    *,
    self_id: ContainerID,
) -> dict[int, int]:
    """The summed weight of `rules` towards the containers of each pool.

    `others` are (container id, pool index, subject) of the containers placed; the
    container itself and containers without a subject never count.
    """
    # (AlwaysTrue expressions, as in the implicit rules, are not evaluated at all)
    tests = [
        (
            None if r.scope.op is Operator.ALWAYS_TRUE else r.scope,
            None if r.match.op is Operator.ALWAYS_TRUE else r.match,
            r.weight,
        )
        for r in rules
    ]
    out: dict[int, int] = {}
    if not tests:
        return out
    for cid, pool, subject in others:
        if cid == self_id or subject is None:
            continue
        w = 0
        for scope, match, weight in tests:
            if (scope is None or scope.evaluate(subject)) and (
                match is None or match.evaluate(subject)
            ):
                w += weight
        if w:
            out[pool] = out.get(pool, 0) + w
    return out


def diluted_scores(tree: PoolTree, weights: Mapping[int, int]) -> dict[int, float]:
    """Every pool's affinity score from the per-pool `weights` (module docstring).

    A pool scores its own weight, plus each ancestor's and each descendant's weight times
    DILUTION ** (links between them).  Pools with score 0 are left out.
    """
    if not weights:
        return {}
    out: dict[int, float] = {}
    for pool in tree.pools:
        score = 0.0
        q = DILUTION
        up = pool.parent
        while up is not None:
            score += q * weights.get(up, 0)
            q *= DILUTION
            up = tree.pools[up].parent
        for below in tree.subtree(pool.index):
            w = weights.get(below, 0)
            if w:
                score += DILUTION ** (tree.pools[below].depth - pool.depth) * w
        if score:
            out[pool.index] = score
    return out
