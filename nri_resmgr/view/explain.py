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

from nri_resmgr.model import ContainerInfo, PolicyState, ResmgrError
from nri_resmgr.policy.base import Policy
from nri_resmgr.policy.topology_aware.explain import COMPONENTS, Ranking, rank_pools
from nri_resmgr.policy.topology_aware.policy import TopologyAwarePolicy
from nri_resmgr.policy.topology_aware.state import TopologyAwareState
from nri_resmgr.view.model import shown_annotations
from nri_resmgr.view.text import shown

__all__ = ["Explanation", "explain", "render_explanation"]


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
