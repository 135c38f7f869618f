"""A decision explained: the request as read, the candidates, the winner, the consequences.

Theory of operation: `explain(policy, state, container)` asks the policy for the decision
it takes for `container` in `state` (`allocate`, pure: the same decision the pipeline
took when `state` is the one it held), and returns an `Explanation`: the container's
request as the runtime gave it and the resource-policy annotations it carries; for the
topology-aware policy the request as that policy read it and every candidate pool with
its sort key and why it lost (`policy.topology_aware.explain.rank_pools`); the
assignment, the decision's reason and the updates it sends to other containers; or, for
a refusal, the policy's message.  `render_explanation` writes it for a terminal, every
name through `text.shown`.  Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from nri_resmgr.model import ContainerInfo, PolicyState, ResmgrError
from nri_resmgr.policy.base import Policy
from nri_resmgr.policy.topology_aware.explain import COMPONENTS, Candidate, Ranking, rank_pools
from nri_resmgr.policy.topology_aware.policy import TopologyAwarePolicy
from nri_resmgr.policy.topology_aware.state import TopologyAwareState
from nri_resmgr.view.model import shown_annotations
from nri_resmgr.view.text import shown

__all__ = [
    "Explanation",
    "explain",
    "explanation_as_dict",
    "explanation_from_dict",
    "now_explained",
    "render_explanation",
]


@dataclass(frozen=True, slots=True)
class Explanation:
    container: str
    qos: str
    #: the request as the runtime gave it: (what, value)
    resources: tuple[tuple[str, str], ...]
    annotations: tuple[tuple[str, str], ...]
    #: "" when refused
    kind: str = ""
    pool: str = ""
    cpus: str = ""
    mems: str = ""
    reason: str = ""
    #: other containers' new cpusets (their names, cpus)
    updates: tuple[tuple[str, str], ...] = ()
    #: the policy's message when the container is refused
    refusal: str = ""
    ranking: Ranking | None = None


#: the plain string fields of an `Explanation`
_PLAIN = ("container", "qos", "kind", "pool", "cpus", "mems", "reason", "refusal")


def _pairs(value: Any) -> tuple[tuple[str, str], ...]:
    return tuple((str(k), str(v)) for k, v in value)


def explanation_as_dict(e: Explanation) -> dict[str, Any]:
    """The JSON form of `e` (`explanation_from_dict` reads it back)."""
    ranking = None
    if e.ranking is not None:
        ranking = {
            "request": e.ranking.request,
            "kind": e.ranking.kind,
            "hinted_pool": e.ranking.hinted_pool,
            "candidates": [
                [c.pool, list(c.key) if c.key is not None else None, c.cpus, c.verdict]
                for c in e.ranking.candidates
            ],
        }
    out = {f: getattr(e, f) for f in _PLAIN}
    out.update(
        resources=[list(p) for p in e.resources],
        annotations=[list(p) for p in e.annotations],
        updates=[list(p) for p in e.updates],
        ranking=ranking,
    )
    return out


def explanation_from_dict(data: Mapping[str, Any]) -> Explanation:
    """The `Explanation` of an `explanation_as_dict` mapping (KeyError/TypeError/ValueError
    when it is not one)."""
    r = data["ranking"]
    ranking = None
    if r is not None:
        ranking = Ranking(
            request=str(r["request"]),
            kind=str(r["kind"]),
            hinted_pool=str(r["hinted_pool"]),
            candidates=tuple(
                Candidate(str(pool), tuple(key) if key is not None else None, str(cpus), str(v))
                for pool, key, cpus, v in r["candidates"]
            ),
        )
    return Explanation(
        **{f: str(data[f]) for f in _PLAIN},
        resources=_pairs(data["resources"]),
        annotations=_pairs(data["annotations"]),
        updates=_pairs(data["updates"]),
        ranking=ranking,
    )


def _resources(info: ContainerInfo) -> tuple[tuple[str, str], ...]:
    r = info.request
    out = [("cpu request", f"{r.cpu_request_milli}m")]
    if r.cpu_limit_milli is not None:
        out.append(("cpu limit", f"{r.cpu_limit_milli}m"))
    if r.memory_request is not None:
        out.append(("memory request", str(r.memory_request)))
    if r.memory_limit is not None:
        out.append(("memory limit", str(r.memory_limit)))
    return tuple(out)


def explain(
    policy: Policy,
    state: PolicyState,
    container: ContainerInfo,
    *,
    names: Mapping[str, str] | None = None,
) -> Explanation:
    """The decision for `container` in `state`, explained (module docstring).

    `policy` is a loaded policy and `state` one of its states; `names` maps other
    containers' ids to the names the updates are shown by.
    """
    names = names or {}
    ranking = None
    if isinstance(policy, TopologyAwarePolicy) and isinstance(state, TopologyAwareState):
        ranking = rank_pools(policy, state, container)
    base = Explanation(
        container=f"{container.namespace}/{container.pod.name}/{container.name}",
        qos=str(container.qos_class),
        resources=_resources(container),
        annotations=shown_annotations(container),
        ranking=ranking,
    )
    try:
        decision = policy.allocate(state, container)
    except ResmgrError as exc:
        return replace(base, refusal=str(exc))
    a = decision.assignment
    return replace(
        base,
        kind=str(a.kind) if a else "",
        pool=a.pool if a else "",
        cpus=str(a.cpus) if a else "",
        mems=str(a.mems) if a else "",
        reason=decision.reason,
        updates=tuple(
            (names.get(u.container_id, u.container_id), str(u.cpus)) for u in decision.updates
        ),
    )


def now_explained(
    policy: Policy, state: PolicyState, container: ContainerInfo, *, names: Mapping[str, str]
) -> Explanation:
    """How a live container would be placed now: `explain` in `state` without it (the
    others as they are now, its own grant released)."""
    return explain(policy, policy.release(state, container.id).state, container, names=names)


def render_explanation(e: Explanation) -> str:
    """The explanation as plain text for a terminal."""
    lines = [f"container {shown(e.container)} ({e.qos})"]
    lines.append("  asked: " + ", ".join(f"{k} {v}" for k, v in e.resources))
    for k, v in e.annotations:
        lines.append(f"  annotation {shown(k)}={shown(v)}")
    if e.ranking is not None:
        r = e.ranking
        lines.append(f"  read as: {r.request} ({r.kind})")
        if r.hinted_pool:
            lines.append(f"  topology hints point at {shown(r.hinted_pool)}")
        lines.append("  candidates, best first (sort key: " + ", ".join(COMPONENTS) + "):")
        for c in r.candidates:
            key = "(" + ", ".join(str(v) for v in c.key) + ")" if c.key else ""
            cpus = f" cpus {c.cpus}" if c.cpus else ""
            lines.append(f"    {shown(c.pool):<12} {key:<40} {c.verdict}{cpus}".rstrip())
    if e.refusal:
        lines.append(f"  refused: {shown(e.refusal)}")
        return "\n".join(lines) + "\n"
    lines.append(
        f"  decision: {e.kind} in {shown(e.pool)}, cpus {e.cpus or '-'}, "
        f"mems {e.mems or '-'} ({shown(e.reason)})"
    )
    for name, cpus in e.updates:
        lines.append(f"  update sent: {shown(name)} -> cpus {cpus}")
    if not e.updates:
        lines.append("  no update to other containers")
    return "\n".join(lines) + "\n"
