"""Which balloon a container goes to: nri-plugins' fill chain, as a table of steps.

Theory of operation: a container becomes a `state.Member` (`member`: its ``groupBy``
group, its annotations) of a balloon of the type `matching.balloon_type_of` picks,
unless it is preserved (`preserved`: ``cpu.preserve``, the ``preserve`` expressions),
then left alone (`leave_alone`).  The balloon is chosen by the type's fill chain
(`fill_chain`), a sequence of step names each looked up in `STEPS`, tried in order
until one gives a balloon: the balloon of the container's ``groupBy`` group; unless
``preferSpreadingPods``, a balloon holding its pod; with ``preferPerNamespaceBalloon``
a balloon of its namespace, else a new one; then with ``preferNewBalloons`` new,
balanced, balanced-inflate, and otherwise balanced, balanced-inflate, new.  An update
first tries the balloon the container is in (``current``).  *Balanced* is a balloon
with room for the request as it is, *balanced-inflate* one that can grow to fit; *new*
takes an empty balloon of the type before it makes one, made at its ``minCPUs`` and
then inflated, as nri-plugins does.  Among a step's candidates that can grow to take
the container, the one with the most free millicores wins (for balanced-inflate,
inflated as far as free CPUs and ``maxCPUs`` let it), then the one with fewest
containers, then the one made first.  A balloon with members of another group is never
a candidate.  `add` puts the container in, `drop` takes it out and `settle` deflates its
balloon, or removes it when empty beyond ``minBalloons``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from nri_resmgr.model import (
    AllocationError,
    Assignment,
    ContainerID,
    ContainerInfo,
    CPUKind,
    Decision,
)
from nri_resmgr.policy.balloons.devices import kubelet_devices, pod_resource_patterns
from nri_resmgr.policy.balloons.matching import balloon_type_of, evaluate, expand
from nri_resmgr.policy.balloons.sizing import NO_CPUS, Sizing
from nri_resmgr.policy.balloons.spec import BalloonType
from nri_resmgr.policy.balloons.state import Balloon, BalloonsState, Member
from nri_resmgr.policy.balloons.views import first_zone, follow_mems, render_changed
from nri_resmgr.policy.common import parse_bool_annotation
from nri_resmgr.policy.decide import diff_updates
from nri_resmgr.policy.kit.annotations import (
    CPU_PRESERVE,
    HIDE_HYPERTHREADS,
    MEMORY_PRESERVE,
    parse_memory_types,
)
from nri_resmgr.topology.cpuset import CPUSet, IDSet

__all__ = [
    "STEPS",
    "add",
    "drop",
    "fill_chain",
    "leave_alone",
    "member",
    "place",
    "plain_member",
    "preserved",
    "settle",
]


def plain_member(c: ContainerInfo) -> Member:
    """`c` as a member before its annotations and its type's ``groupBy`` are read."""
    return Member(
        container_id=c.id,
        pod_id=c.pod.id,
        namespace=c.namespace,
        pretty=c.pretty,
        balloon="",
        milli=c.request.cpu_request_milli,
    )


def member(c: ContainerInfo, t: BalloonType) -> Member:
    """`c` as a member of a `t` balloon: its group, annotations and memory kinds."""
    kinds = parse_memory_types(c)
    return replace(
        plain_member(c),
        group=expand(t.group_by, c) if t.group_by else "",
        hide_hyperthreads=parse_bool_annotation(c, HIDE_HYPERTHREADS),
        memory_kinds=tuple(sorted(kinds)) if kinds else (),
        preserve_mems=bool(parse_bool_annotation(c, MEMORY_PRESERVE)),
        devices=kubelet_devices(c) if pod_resource_patterns(t.prefer_close_to_devices) else (),
    )


def preserved(ctx: Sizing, c: ContainerInfo) -> str | None:
    """Why the policy leaves `c` alone (``cpu.preserve`` annotation, the ``preserve``
    expressions), or None: such a container is in no balloon, its cpuset untouched."""
    if parse_bool_annotation(c, CPU_PRESERVE):
        return f"preserved: annotation {CPU_PRESERVE}"
    match = ctx.config.options.preserve
    for expr in match.match_expressions if match is not None else ():
        if evaluate(expr, c):
            return f"preserved: matches {expr.key} {expr.operator} {list(expr.values)}"
    return None


def leave_alone(
    ctx: Sizing, state: BalloonsState, c: ContainerInfo, reason: str
) -> Decision[BalloonsState]:
    new = follow_mems(ctx, state, drop(ctx, state, c.id)) if c.id in state.members else state
    untouched = Assignment(
        container_id=c.id, cpus=IDSet(), mems=IDSet(), kind=CPUKind.NONE, pool=""
    )
    before, after = render_changed(ctx, state, new, c.id)
    after[c.id] = untouched
    return Decision(
        state=new,
        assignment=untouched,
        updates=diff_updates(before, after, skip={c.id}),
        reason=reason,
    )


def fill_chain(t: BalloonType) -> tuple[str, ...]:
    """The names of the fill steps (`STEPS`) a `t` container tries, in order."""
    chain: list[str] = []
    if t.group_by:
        chain.append("same-group")
    if not t.prefer_spreading_pods:
        chain.append("same-pod")
    if t.prefer_per_namespace_balloon:
        chain += ["same-namespace", "new"]
    if t.prefer_new_balloons:
        chain += ["new", "balanced", "balanced-inflate"]
    else:
        chain += ["balanced", "balanced-inflate", "new"]
    return tuple(chain)


@dataclass(frozen=True, slots=True)
class Ask:
    """What every fill step sees: member `m` of type `t` looking for a balloon in
    `state`; `mine` are the type's balloons it may join (none of another group), in the
    state's order; `prefer` the balloon it is in (an update), `seed` the CPUs a new
    balloon keeps what it can of (rebuild)."""

    ctx: Sizing
    state: BalloonsState
    t: BalloonType
    m: Member
    mine: Sequence[Balloon]
    members: Mapping[str, Sequence[Member]]
    prefer: str | None
    seed: CPUSet

    def free(self, b: Balloon, *, inflated: bool) -> int:
        """`b`'s free millicores, now or inflated as far as free CPUs and ``maxCPUs``
        let it."""
        cpus = len(b.cpus)
        if inflated:
            cpus += len(self.ctx.config.available - self.state.used)
            if self.t.max_cpus:
                cpus = min(cpus, max(self.t.max_cpus, len(b.cpus)))
        return 1000 * cpus - self.state.milli_of(b.name)


#: a fill step: the balloon it gives (resized for the member), or None, adding to the
#: reasons why its candidates could not take the member
Step = Callable[[Ask, list[str]], Balloon | None]


def _among(cands: Callable[[Ask], list[Balloon]], *, inflated: bool = False) -> Step:
    """The step choosing among the balloons `cands` names that can grow to take the
    member: most free millicores (inflated: when inflated), fewest containers, made
    first."""

    def step(a: Ask, reasons: list[str]) -> Balloon | None:
        fits: list[tuple[tuple[int, int, int], Balloon]] = []
        for b in cands(a):
            got = a.ctx.resize(a.state, b, a.state.milli_of(b.name) + a.m.milli, occupied=True)
            if isinstance(got, str):
                reasons.append(got)
                continue
            rank = (-a.free(b, inflated=inflated), len(a.members[b.name]), a.mine.index(b))
            fits.append((rank, got))
        return min(fits, key=lambda kb: kb[0])[1] if fits else None

    return step


def _new(a: Ask, reasons: list[str]) -> Balloon | None:
    """An empty balloon of the type, else a new one: made at its ``minCPUs``, then
    inflated for the member as a balloon already there, as nri-plugins does (the second
    pick grows near the first); seeded (rebuild) it is sized at once."""
    for b in (b for b in a.mine if not a.members[b.name]):
        got = a.ctx.resize(a.state, b, a.m.milli, occupied=True)
        if isinstance(got, Balloon):
            return got
        reasons.append(got)
    made = a.ctx.new_balloon(a.state, a.t, a.m.milli if a.seed else None, seed=a.seed)
    if isinstance(made, Balloon) and not a.seed:
        made = a.ctx.resize(a.state.with_balloon(made), made, a.m.milli, occupied=True)
    if isinstance(made, Balloon):
        return made
    reasons.append(made)
    return None


def _holding(a: Ask, same: Callable[[Member], bool]) -> list[Balloon]:
    return [b for b in a.mine if any(same(x) for x in a.members[b.name])]


#: the fill steps by name (`fill_chain`)
STEPS: Mapping[str, Step] = {
    "current": _among(lambda a: [b for b in a.mine if b.name == a.prefer]),
    "same-group": _among(lambda a: _holding(a, lambda x: x.group == a.m.group)),
    "same-pod": _among(lambda a: _holding(a, lambda x: x.pod_id == a.m.pod_id)),
    "same-namespace": _among(lambda a: _holding(a, lambda x: x.namespace == a.m.namespace)),
    "balanced": _among(lambda a: [b for b in a.mine if a.free(b, inflated=False) >= a.m.milli]),
    "balanced-inflate": _among(lambda a: list(a.mine), inflated=True),
    "new": _new,
}


def place(
    ctx: Sizing,
    state: BalloonsState,
    t: BalloonType,
    m: Member,
    *,
    prefer: str | None = None,
    seed: CPUSet = NO_CPUS,
) -> tuple[Balloon, str]:
    """The balloon (resized, or new: seeded with `seed`) `m` goes to in `state`, and
    the fill step that gave it: the first of ``current`` (when `prefer`) and
    `fill_chain` to give one (module docstring); an `AllocationError` with every
    candidate's reason when none does."""
    mine = state.of_type(t.name)
    members = {b.name: state.members_of(b.name) for b in mine}
    if t.group_by:
        mine = [b for b in mine if all(x.group == m.group for x in members[b.name])]
    ctx = ctx.for_member(t, m)  # close to its kubelet devices (``podresourceapi:``)
    ask = Ask(ctx, state, t, m, mine, members, prefer, seed)
    reasons: list[str] = []
    steps = ("current",) if prefer is not None else ()
    for name in steps + fill_chain(t):
        got = STEPS[name](ask, reasons)
        if got is not None:
            return got, name
    raise AllocationError(
        f"no {t.name} balloon can take {m.milli}m CPU: " + "; ".join(dict.fromkeys(reasons))
    )


def add(
    ctx: Sizing,
    state: BalloonsState,
    c: ContainerInfo,
    *,
    prefer: str | None = None,
    seed: CPUSet = NO_CPUS,
    as_member: tuple[BalloonType, Member] | None = None,
) -> tuple[BalloonsState, str]:
    """`state` with `c` placed, as its annotations say or (rebuild) as `as_member`."""
    if as_member is None:
        t = balloon_type_of(c, ctx.config)
        m = member(c, t)
    else:
        t, m = as_member
    try:
        balloon, step = place(ctx, state, t, m, prefer=prefer, seed=seed)
    except AllocationError as exc:
        raise AllocationError(f"{c.pretty}: {exc}") from exc
    new = ctx.commit(state, balloon)
    m = replace(m, balloon=balloon.name)
    new = new.with_member(replace(m, memory=first_zone(ctx, new, m)))
    return new, f"in balloon {balloon.name} ({step})"


def drop(ctx: Sizing, state: BalloonsState, cid: ContainerID) -> BalloonsState:
    """`state` without `cid`: its balloon deflates, or goes when empty and optional."""
    m = state.members[cid]
    return settle(ctx, state.without_member(cid), m.balloon)


def settle(ctx: Sizing, state: BalloonsState, name: str) -> BalloonsState:
    """`state` with balloon `name` sized for its members, or gone when empty and
    beyond its type's ``minBalloons``."""
    b = state.balloons.get(name)
    if b is None:
        return state
    t = ctx.types[b.type]
    got = ctx.resize(state, b, state.milli_of(name), occupied=bool(state.members_of(name)))
    assert isinstance(got, Balloon)  # deflating within maxCPUs always fits
    state = ctx.commit(state, got)
    if not state.members_of(name) and len(state.of_type(t.name)) > t.min_balloons:
        # deflated to its minCPUs first, as nri-plugins does: the CPUs it gave back
        # are shared at once, the rest only when a balloon next inflates
        return state.without_balloon(name)
    return state
