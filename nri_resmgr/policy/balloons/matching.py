"""Which balloon type a container belongs to: annotations, namespaces, expressions.

Theory of operation: nri-plugins' expressions (``matchExpressions``, and ``${key}``
references in ``groupBy``) look a *key* up on the container and test the value with an
*operator*.  Keys are paths: ``name``, ``namespace``, ``qosclass``, ``id``,
``labels/KEY``, ``tags/KEY`` on the container, and ``pod/name``, ``pod/namespace``,
``pod/qosclass``, ``pod/id``, ``pod/uid``, ``pod/labels/KEY`` on its pod.  A *joint key*
``:k1:k2`` (or ``:<key-sep><value-sep>k1<key-sep>k2``) is the values of its keys joined,
found when any of them is.  ``Matches*`` operators use shell-style globs.

`balloon_type_of` picks the type: the ``balloon.balloons.resource-policy.nri.io``
annotation first (an unknown name is an `AnnotationError`), then the first type in
`ResolvedConfig.types` whose ``namespaces`` globs or ``matchExpressions`` match (the
reserved type also matches ``kube-system`` and ``reservedPoolNamespaces``), then
``default``.
"""

from __future__ import annotations

import fnmatch
import re

from nri_resmgr.model import ANNOTATION_DOMAIN, AnnotationError, ContainerInfo
from nri_resmgr.policy.balloons.config import (
    DEFAULT,
    RESERVED,
    BalloonType,
    Expression,
    Operator,
    ResolvedConfig,
)
from nri_resmgr.policy.common import namespace_matches

__all__ = ["BALLOON_ANNOTATION", "balloon_type_of", "evaluate", "expand", "key_value"]

BALLOON_ANNOTATION = f"balloon.balloons.{ANNOTATION_DOMAIN}"

_SEPARATOR_FORBIDDEN = re.compile(r"[0-9A-Za-z/.]")


def _resolve(container: ContainerInfo, key: str) -> str | None:
    parts = [p for p in key.strip("/").split("/") if p]
    if not parts:
        return None
    head, rest = parts[0], "/".join(parts[1:])
    pod = container.pod
    if head == "pod":
        if not rest:
            return None
        sub = rest.split("/", 1)
        name, tail = sub[0], (sub[1] if len(sub) > 1 else "")
        pod_scalars = {
            "name": pod.name,
            "namespace": pod.namespace,
            "qosclass": str(pod.qos_class),
            "id": str(pod.id),
            "uid": pod.uid,
        }
        if name in pod_scalars and not tail:
            return pod_scalars[name]
        if name == "labels" and tail:
            return pod.labels.get(tail)
        return None
    scalars = {
        "name": container.name,
        "namespace": container.namespace,
        "qosclass": str(container.qos_class),
        "id": str(container.id),
    }
    if head in scalars and not rest:
        return scalars[head]
    # container labels and tags: the NRI view carries none of them
    return None


def key_value(container: ContainerInfo, key: str) -> str | None:
    """The value of `key` on `container` (joint keys included), None when not found."""
    if len(key) >= 4 and key[0] == ":":
        body = key[1:]
        ksep, vsep = body[0], body[1]
        if _SEPARATOR_FORBIDDEN.match(ksep) or _SEPARATOR_FORBIDDEN.match(vsep):
            ksep = vsep = ":"
        else:
            body = body[2:]
        values = [_resolve(container, k) for k in body.split(ksep)]
        if all(v is None for v in values):
            return None
        return vsep.join(v or "" for v in values)
    return _resolve(container, key)


def evaluate(expr: Expression, container: ContainerInfo) -> bool:
    """Whether `container` satisfies `expr` (nri-plugins' semantics)."""
    op = expr.operator
    if op is Operator.ALWAYS_TRUE:
        return True
    value = key_value(container, expr.key)
    found = value is not None
    v = value or ""
    first = expr.values[0] if expr.values else ""
    if op is Operator.EQUALS:
        return found and (v == first or first == "*")
    if op is Operator.NOT_EQUAL:
        return not found or v != first
    if op in (Operator.MATCHES, Operator.MATCHES_NOT):
        hit = found and fnmatch.fnmatchcase(v, first)
        return hit if op is Operator.MATCHES else not hit
    if op in (Operator.IN, Operator.NOT_IN):
        hit = found and any(v == x or x == "*" for x in expr.values)
        return hit if op is Operator.IN else not hit
    if op in (Operator.MATCHES_ANY, Operator.MATCHES_NONE):
        hit = found and any(fnmatch.fnmatchcase(v, p) for p in expr.values)
        return hit if op is Operator.MATCHES_ANY else not hit
    if op is Operator.EXISTS:
        return found
    return not found  # NOT_EXIST


_REF = re.compile(r"\$\{([^}]*)\}|\$([A-Za-z0-9_/.:-]+)")


def expand(template: str, container: ContainerInfo) -> str:
    """`template` with its ``${key}`` references replaced by their values ("" if absent)."""
    return _REF.sub(lambda m: key_value(container, m.group(1) or m.group(2)) or "", template)


def _matches(t: BalloonType, container: ContainerInfo, config: ResolvedConfig) -> bool:
    if t.name == RESERVED and namespace_matches(container.namespace, config.reserved_namespaces):
        return True
    if t.namespaces and namespace_matches(container.namespace, t.namespaces):
        return True
    return any(evaluate(e, container) for e in t.match_expressions)


def balloon_type_of(container: ContainerInfo, config: ResolvedConfig) -> BalloonType:
    """The balloon type `container` goes to (module docstring)."""
    wanted = container.annotation(BALLOON_ANNOTATION)
    if wanted is not None:
        t = config.type_named(wanted.strip())
        if t is None:
            raise AnnotationError(
                f"{container.pretty}: annotation {BALLOON_ANNOTATION} names balloon type "
                f'"{wanted}"; expected one of {", ".join(x.name for x in config.types)}'
            )
        return t
    for t in config.types:
        if _matches(t, container, config):
            return t
    found = config.type_named(DEFAULT)
    assert found is not None  # resolve_config always adds it
    return found
