"""The balloons a restart finds: rebuilding the state from what containers report.

Theory of operation: `rebuild` first replays nri-plugins' restart: the initial state
with every container allocated again in the order given; when that puts each where it
reports it runs, that is the state (`replayed`: the balloons own the CPUs they owned,
not only show them).  Otherwise it keeps every group of containers that run on the same
CPUs in one balloon of their type claiming those CPUs (`claim`; members hiding
hyperthreads that report one thread of each core a group of their type reports are in
that group: `joined`), when they are free and enough for the balloon as it is (no
inflating); the rest are placed as if new, in the order given (`placement.add`), a new
balloon keeping what it can of the CPUs its container runs on.  The CPUs a container
reports may include idle ones it shares: where other groups report CPUs of the same
domain, those they do not are the balloon's own and it keeps them, and it keeps a CPU in
each domain it reports.  A claim takes CPUs no other group reports first, and a
``hideHyperthreads`` balloon takes for the siblings it does not show those another
group's shared idle CPUs show to be held (`held_cpus`).  A container whose annotations
cannot be read is in the default type, as a plain member (`rebuild_member`).  The empty
balloons of ``minBalloons`` then take CPUs no container reports (`top_up`), the idle
CPUs shared are set again (`reshared`) and the memory zones (`rezoned`).  The reserved
balloon is made before any claim, at its home.  So are, without CPUs, the
``minBalloons`` composites a component of which counts against a ``maxBalloons``
(`slots`): the daemon may have made them before the balloons the claims make, and made
after those a component would be one too many.  Each container the rebuild moves has its
cause in the decision's reason (`causes`: why no claim kept it, or what changed in the
balloon it was kept in), as issue 24 asks of a restart without records.  A rebuild from
the rendered result moves nothing, nor does a second one, with one known exception: a
``balance-balloons`` composite without CPUs of its own cannot show which component it
had, and the rebuild may give it the other one.  A restart with placement records does
not guess any of this (`records`, issue 24); the rebuild is what a restart without them,
or with records the report contradicts, comes to.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from nri_resmgr.model import (
    AllocationError,
    AnnotationError,
    Assignment,
    ContainerID,
    ContainerInfo,
    Decision,
)
from nri_resmgr.policy.balloons.allocation import level_cpus
from nri_resmgr.policy.balloons.matching import balloon_type_of
from nri_resmgr.policy.balloons.memzone import MemZone
from nri_resmgr.policy.balloons.placement import add, member, plain_member, preserved
from nri_resmgr.policy.balloons.sizing import NO_CPUS, Sizing
from nri_resmgr.policy.balloons.spec import DEFAULT, RESERVED, BalloonType
from nri_resmgr.policy.balloons.state import Balloon, BalloonsState, Member
from nri_resmgr.policy.balloons.views import first_zone, hides, render
from nri_resmgr.policy.common import one_thread_per_core, take_cpus
from nri_resmgr.policy.kit.rebuild import each_once, holders_per_cpu, moved
from nri_resmgr.topology.cpuset import CPUSet, IDSet, union

__all__ = ["Allocate", "rebuild"]

#: the policy's allocate (`rebuild` replays a restart with it)
Allocate = Callable[[BalloonsState, ContainerInfo], Decision[BalloonsState]]


def rebuild(
    ctx: Sizing, containers: Sequence[ContainerInfo], allocate: Allocate
) -> Decision[BalloonsState]:
    """The state `containers` (reporting where they run) are in after a restart, and the
    updates of those it moves (module docstring); `allocate` is the policy's."""
    st = BalloonsState(balloons={}, members={})
    notes: list[str] = []
    # preserved ones stay where they are, unknown
    unique = {c.id: c for c in each_once(c for c in containers if preserved(ctx, c) is None)}
    again = replayed(ctx, list(unique.values()), allocate)
    if again is not None:
        return Decision(state=again, updates=(), reason="rebuilt: as created")
    known = {c.id: rebuild_member(ctx, c, notes) for c in unique.values()}
    types = {cid: t for cid, (t, _) in known.items()}
    # 0. the reserved balloon where it is from the start (`initial_state`): no other
    # balloon claims its CPUs; its containers' claim takes it over
    reserved = ctx.new_balloon(st, ctx.types[RESERVED], None)
    assert isinstance(reserved, Balloon)  # initial_state makes it so
    st = st.with_balloon(reserved)
    # the composites of minBalloons whose components count against a maxBalloons are
    # made first, without CPUs (`slots`): made after the claims, a component could be
    # one too many
    st, pending = slots(ctx, st)
    # 1. containers on the same CPUs, of the same type: one balloon claiming them
    groups: dict[tuple[str, CPUSet], list[ContainerInfo]] = {}
    for c in unique.values():
        if c.current_cpus:
            groups.setdefault((types[c.id].name, c.current_cpus), []).append(c)
    groups = joined(ctx, groups, known)
    holders = holders_per_cpu(cpus for _, cpus in groups)
    seen_held = held_cpus(ctx, groups, known)
    placed: set[ContainerID] = set()
    #: why each container the claims did not keep was placed as if new
    unkept = {c.id: "it reports no CPUs" for c in unique.values() if not c.current_cpus}
    for (tname, cpus), members in sorted(
        groups.items(), key=lambda kv: (len(kv[0][1]), kv[0][0], kv[0][1].sorted())
    ):
        t = ctx.types[tname]
        ms = [known[c.id][1] for c in members]
        got = claim(ctx, st, t, cpus, ms, holders, seen_held)
        if isinstance(got, str):
            unkept.update((c.id, f"its CPUs {cpus} not kept: {got}") for c in members)
            continue
        st = st.with_balloon(got)
        for m in ms:
            st = st.with_member(replace(m, balloon=got.name))
            placed.add(m.container_id)
    # 2. the balloons every type has from the start, then everyone else as if new
    reported = union(seen_by(ctx, c, *known[c.id]) for c in unique.values())
    kept = [b for b in pending if b.name in st.balloons and not st.members_of(b.name)]
    st = st.with_balloons({n: b for n, b in st.balloons.items() if b not in kept})
    st = top_up(ctx, st, unseen=ctx.config.available - reported, made=kept)
    for c in unique.values():
        if c.id in placed:
            continue
        try:
            st, _ = add(ctx, st, c, seed=c.current_cpus or IDSet(), as_member=known[c.id])
        except (AllocationError, AnnotationError) as exc:
            notes.append(f"not placed: {exc}")
    st = reshared(ctx, st, unique)
    st = rezoned(ctx, st, unique)
    rendered = render(ctx, st)
    updates = moved(unique.values(), rendered)
    notes += causes(updates, unique, st, unkept)
    reason = "rebuilt" + ("; " + "; ".join(notes) if notes else "")
    return Decision(state=st, updates=updates, reason=reason)


def replayed(
    ctx: Sizing, containers: Sequence[ContainerInfo], allocate: Allocate
) -> BalloonsState | None:
    """The initial state with `containers` allocated in the order given, when that
    puts every one of them exactly where it reports it runs (CPUs and memory
    nodes), else None.  nri-plugins restarts so, and where that moves nobody the
    balloons then own the CPUs theirs own, not only show the same ones."""
    st = ctx.initial()
    if isinstance(st, str):
        return None
    for c in containers:
        if c.current_cpus is None:
            return None
        try:
            st = allocate(st, c).state
        except (AllocationError, AnnotationError):
            return None
    rendered = render(ctx, st)
    for c in containers:
        got = rendered[c.id]
        if got.cpus != c.current_cpus or got.mems != (c.current_mems or IDSet()):
            return None
    return st


def reshared(
    ctx: Sizing, state: BalloonsState, containers: Mapping[ContainerID, ContainerInfo]
) -> BalloonsState:
    """`state` with the idle CPUs each balloon shares (rebuild): those of its
    domains, as when nri-plugins starts; when every container reports its CPUs,
    for a balloon that kept the CPUs its containers report, only those of them they
    report (nri-plugins shares a deleted balloon's last CPUs only at the next
    inflation: `sizing.Sizing.share_idle`), and the idle ones they report beyond its
    domains (shared before it deflated out of them)."""
    st = state.with_balloons({n: replace(b, shared=NO_CPUS) for n, b in state.balloons.items()})
    st = ctx.share_idle(st, add=ctx.config.available - st.used)
    if any(not c.current_cpus for c in containers.values()):
        return st
    balloons = dict(st.balloons)
    idle = ctx.config.available - st.used - ctx.topology.isolated_cpus()
    for name, b in st.balloons.items():
        t = ctx.types[b.type]
        seen = []
        for m in st.members_of(name):
            cpus = containers[m.container_id].current_cpus or NO_CPUS
            if hides(t, m):  # it sees one thread of each core it shares
                cpus = cpus | IDSet(s for c in cpus for s in ctx.topology.siblings(c))
            seen.append(cpus)
        reported = union(seen)
        if t.share_idle_cpus_in_same is not None and reported and b.cpus <= reported:
            # idle CPUs it shows beyond its domains it shared before it deflated out of
            # theirs (a balloon keeps what it shares until another balloon takes it)
            beyond = (reported - b.cpus) & idle
            balloons[name] = replace(b, shared=(b.shared & reported) | beyond)
    return st.with_balloons(balloons)


def rezoned(
    ctx: Sizing, state: BalloonsState, containers: Mapping[ContainerID, ContainerInfo]
) -> BalloonsState:
    """`state` with every member's memory zone as it joins its balloon now
    (rebuild), or the memory nodes it reports when they hold that zone: a zone
    widened before the restart stays as wide."""
    members = {}
    for cid, m in state.members.items():
        mz = first_zone(ctx, state, m)
        now = containers[cid].current_mems
        if mz is not None and now and mz.zone <= now:
            mz = MemZone(affinity=mz.affinity, zone=now, given=now)
        members[cid] = replace(m, memory=mz)
    return BalloonsState(balloons=state.balloons, members=members)


def rebuild_member(ctx: Sizing, c: ContainerInfo, notes: list[str]) -> tuple[BalloonType, Member]:
    """`c`'s balloon type and membership at rebuild, the same for claiming its CPUs
    and for placing it as new: when its annotations cannot be read (an unknown
    balloon type, a bad value) it goes to the default type as a plain member, where
    it went the first time, so a second rebuild does not move it."""
    try:
        t = balloon_type_of(c, ctx.config)
        return t, member(c, t)
    except AnnotationError as exc:
        notes.append(f"unreadable, in the default balloon: {exc}")
    fallback = ctx.config.type_named(DEFAULT)
    assert fallback is not None  # resolve_config always adds it
    return fallback, plain_member(c)


def claim(
    ctx: Sizing,
    state: BalloonsState,
    t: BalloonType,
    cpus: CPUSet,
    members: Sequence[Member],
    holders: Mapping[int, int],
    held: CPUSet,
) -> Balloon | str:
    """A balloon of `t` for `members`, now running on `cpus`, keeping them there:
    their CPUs first, then hidden siblings of theirs that are `held` (`held_cpus`);
    or why it cannot (the cause `rebuild` states for moving them)."""
    milli = sum(m.milli for m in members)
    if t.group_by and len({m.group for m in members}) > 1:
        return f"they are of different {t.name!r} groups"
    empty = [b for b in state.of_type(t.name) if not state.members_of(b.name)]
    base = min(empty, key=lambda b: b.instance) if empty else None
    if base is not None:
        # the reserved balloon, made first: taken over, it keeps its CPUs first
        state = state.without_balloon(base.name)
    fresh = ctx.unsized(state, t, cpus)
    if isinstance(fresh, str):
        return fresh
    want = ctx.needed_cpus(fresh, milli, occupied=True)
    if t.max_cpus and want > t.max_cpus:
        return f"a {t.name!r} balloon for them needs {want} CPUs; maxCPUs is {t.max_cpus}"
    mine = cpus
    if any(hides(t, m) for m in members):
        # the container sees the lowest thread of each core the balloon has: the
        # balloon may hold the higher threads of those cores too
        mine = cpus | IDSet(s for c in cpus for s in ctx.topology.siblings(c) if s > c)
    own = mine & (ctx.config.available - state.used)
    # reported by no other group (a hidden sibling is not in `cpus`: any report of it
    # is another's)
    alone = IDSet(c for c in own if holders.get(c, 0) <= (1 if c in cpus else 0))
    prefer = [cpus & alone, alone & held, alone, cpus]
    level = t.share_idle_cpus_in_same
    if level is not None:
        # `cpus` may include idle CPUs shared in the balloon's domains (a composite's
        # components, or a large balloon, may span several).  Where others report
        # CPUs of a domain too, those they share are the idle ones and the rest
        # were the balloon's own; elsewhere keeping a CPU in each domain keeps the
        # balloon's view
        units = {level_cpus(ctx.topology, IDSet([c]), level) for c in own}
        seen = [u for u in units if any(holders.get(c, 0) > 1 for c in u & cpus)]
        firsts = IDSet(min(u & alone or u & own) for u in units)
        prefer[:0] = [union(u & alone for u in seen), firsts]
    # None when `own` is too few to hold their balloon as it is: not a placement of
    # this configuration (a live reconfiguration changed the type's sizes), so they
    # go by the fill chain, as nri-plugins refills, not into a balloon inflated
    # around them
    if base is not None:
        own, prefer = own | base.cpus, [base.cpus, *prefer]
    keep = take_cpus(ctx.topology, own, want, prefer=prefer)
    if keep is None:
        return f"a {t.name!r} balloon for them needs {want} CPUs; {len(own)} of them are free"
    return ctx.fill(state, fresh, keep, milli, occupied=True)


def causes(
    updates: Sequence[Assignment],
    containers: Mapping[ContainerID, ContainerInfo],
    state: BalloonsState,
    unkept: Mapping[ContainerID, str],
) -> list[str]:
    """The cause of each of `updates` (rebuild), for the decision's reason: why the
    claims did not keep it (`unkept`), else what changed in the balloon it was kept in
    (its CPUs, or the idle CPUs it shares, or its memory zone)."""
    out = []
    for u in updates:
        cid = u.container_id
        c = containers[cid]
        if cid in unkept:
            why = unkept[cid]
        elif u.cpus and u.cpus != c.current_cpus:
            why = f"kept in {state.members[cid].balloon}, which now has CPUs {u.cpus}"
        else:
            why = f"kept in {state.members[cid].balloon}, memory now on nodes {u.mems}"
        out.append(f"moved: {cid}: {why}")
    return out


def seen_by(ctx: Sizing, c: ContainerInfo, t: BalloonType, m: Member) -> CPUSet:
    """The CPUs `c`'s report shows to be in its view (rebuild): those it reports, and,
    when it hides hyperthreads, the higher threads of their cores (it sees the lowest
    thread of each core of its view: `views.render_member`)."""
    cpus = c.current_cpus or NO_CPUS
    if not hides(t, m):
        return cpus
    known = cpus & ctx.topology.online_cpus()
    return cpus | IDSet(s for x in known for s in ctx.topology.siblings(x) if s > x)


def joined(
    ctx: Sizing,
    groups: Mapping[tuple[str, CPUSet], Sequence[ContainerInfo]],
    known: Mapping[ContainerID, tuple[BalloonType, Member]],
) -> dict[tuple[str, CPUSet], list[ContainerInfo]]:
    """`groups` with each group of members hiding hyperthreads that reports one thread
    of each core a group of its type seeing every thread reports, in that group
    (rebuild): they shared one balloon (`views.render_member`), and kept apart the
    rebuild would move one of them to a balloon of its own."""
    out = {key: list(members) for key, members in groups.items()}
    seeing = {
        (tname, one_thread_per_core(ctx.topology, cpus & ctx.topology.online_cpus())): (tname, cpus)
        for (tname, cpus), members in sorted(groups.items(), key=lambda kv: kv[0][1].sorted())
        if not any(hides(*known[c.id]) for c in members)
    }
    for key, members in groups.items():
        into = seeing.get(key)
        if into is None or into == key or not all(hides(*known[c.id]) for c in members):
            continue
        out[into].extend(out.pop(key))
    return out


def held_cpus(
    ctx: Sizing,
    groups: Mapping[tuple[str, CPUSet], Sequence[ContainerInfo]],
    known: Mapping[ContainerID, tuple[BalloonType, Member]],
) -> CPUSet:
    """The CPUs the reports show to be in some balloon though no one reports them
    (rebuild): those in the ``shareIdleCPUsInSame`` domains of a group that sees
    every thread, yet not in its cpuset, were not idle.  A claim prefers them for
    the hidden hyperthreads of a ``hideHyperthreads`` balloon."""
    out: list[CPUSet] = []
    for (tname, cpus), members in groups.items():
        level = ctx.types[tname].share_idle_cpus_in_same
        if level is None or any(hides(*known[c.id]) for c in members):
            continue
        out.append(level_cpus(ctx.topology, cpus, level) - cpus)
    return union(out) & ctx.config.available


def slots(ctx: Sizing, state: BalloonsState) -> tuple[BalloonsState, list[Balloon]]:
    """`state` with the ``minBalloons`` instances, without CPUs, of each composite type a
    component of which has a ``maxBalloons`` (rebuild), and those instances: a
    component counts against its type's ``maxBalloons`` when it is made
    (`sizing.Sizing.unsized`) and a top-level balloon does not count components, so
    the daemon may have made the composite before the balloons the claims make."""
    made: list[Balloon] = []
    for t in sorted(ctx.config.types, key=ctx.creation_rank):
        if not any(ctx.types[c.balloon_type].max_balloons for c in t.components):
            continue
        while len(state.of_type(t.name)) < t.min_balloons:
            got = ctx.unsized(state, t)
            if isinstance(got, str):
                break
            state = state.with_balloon(got)
            made.append(got)
    return state, made


def top_up(
    ctx: Sizing, state: BalloonsState, *, unseen: CPUSet, made: Sequence[Balloon] = ()
) -> BalloonsState:
    """`state` with at least ``minBalloons`` balloons of every type (rebuild).

    The empty ones are made in the initial state's order (`sizing.Sizing.creation_rank`) and
    take the CPUs they have there (`initial_homes`) when those are unseen (in no
    container's reported cpuset) and free, so a rebuild without containers is the
    initial state; else they take their CPUs from `unseen` where they can: that is
    where empty balloons were, so the idle CPUs other balloons share stay the same.
    (The reserved balloon is made before the claims, at its home.)
    """
    # unseen CPUs in the domains whose idle CPUs a claimed balloon shares are not
    # idle (it would report them): empty balloons held them
    held = unseen & union(
        level_cpus(ctx.topology, b.cpus, level)
        for b in state.balloons.values()
        if (level := ctx.types[b.type].share_idle_cpus_in_same) is not None
    )
    for t in sorted(ctx.config.types, key=ctx.creation_rank):
        while len(state.of_type(t.name)) < t.min_balloons:
            mine = [b for b in made if b.type == t.name and b.name not in state.balloons]
            got = ctx.resize(state, mine[0], 0, occupied=False) if mine else None
            if got is None:
                got = ctx.new_balloon(state, t, None)
            if isinstance(got, str):
                break
            free = unseen - state.used
            home = ctx.initial_homes.get(got.name, NO_CPUS)
            if home and home <= free and len(home) == len(got.cpus):
                got = ctx.fill(state, got, home, 0, occupied=False)
            elif len(free) >= len(got.cpus):
                got = ctx.fill(state, got, free, 0, occupied=False, first=held)
            state = state.with_balloon(got)
    # the initial state's balloons first, in its order (nri-plugins' list of balloons
    # after a restart), then the others
    order = {name: i for i, name in enumerate(ctx.initial_homes)}
    ranked = sorted(state.balloons.items(), key=lambda nb: order.get(nb[0], len(order)))
    return state.with_balloons(dict(ranked))
