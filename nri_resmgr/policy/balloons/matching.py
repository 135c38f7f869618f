"""Which balloon type a container belongs to: annotations, namespaces, expressions.

Theory of operation: nri-plugins' expressions (``matchExpressions``, and ``${key}``
references in ``groupBy``) look a *key* up on the container and test the value with an
*operator*, as `nri_resmgr.policy.expressions` (shared with the topology-aware policy's
affinities) defines them.

`balloon_type_of` picks the type: the ``balloon.balloons.resource-policy.nri.io``
annotation first (an unknown name is an `AnnotationError`), then the first type in
`ResolvedConfig.types` whose ``namespaces`` globs or ``matchExpressions`` match (the
reserved type also matches ``kube-system`` and ``reservedPoolNamespaces``), then
``default``.
"""

from __future__ import annotations

from nri_resmgr.model import ANNOTATION_DOMAIN, AnnotationError, ContainerInfo
from nri_resmgr.policy import expressions
from nri_resmgr.policy.balloons.config import ResolvedConfig
from nri_resmgr.policy.balloons.spec import DEFAULT, RESERVED, BalloonType, Expression
from nri_resmgr.policy.common import namespace_matches
from nri_resmgr.policy.expressions import Operator, subject_of

__all__ = ["BALLOON_ANNOTATION", "balloon_type_of", "evaluate", "expand", "key_value"]

BALLOON_ANNOTATION = f"balloon.balloons.{ANNOTATION_DOMAIN}"


def key_value(container: ContainerInfo, key: str) -> str | None:
    """The value of `key` on `container` (joint keys included), None when not found."""
    return expressions.Expression(key, Operator.EXISTS).value_of(subject_of(container))


def evaluate(expr: Expression, container: ContainerInfo) -> bool:
    """Whether `container` satisfies `expr` (nri-plugins' semantics)."""
    compiled = expressions.Expression(expr.key, expr.operator, expr.values)
    return compiled.evaluate(subject_of(container))


def expand(template: str, container: ContainerInfo) -> str:
    """`template` with its ``${key}`` references replaced by their values ("" if absent)."""
    return expressions.expand(template, subject_of(container))


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
