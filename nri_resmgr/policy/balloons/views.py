"""What a balloon's containers see: views, rendered assignments, memory zones.

Theory of operation: a balloon's *view* (`views`) is its own CPUs plus the idle CPUs it
shares (``shareIdleCPUsInSame``, `sizing.Sizing.share_idle`); an empty balloon with no
CPUs shows the reserved balloon's.  Its memory nodes are those near the view's CPUs of
the type's ``memoryTypes`` (DRAM by default) when memory is pinned (`memory_nodes`):
for kinds asked, libmem's first zone (the CPUs' nodes widened by the nearest nodes of
each kind they lack, then only the kinds asked).
A member is rendered from its balloon's view (`render_member`): one thread per core
when it hides hyperthreads (`hides`: its annotation, else its type's), no CPUs without
``pinCPU``, its memory zone's nodes when it has one, none with ``memory.preserve``.
A member's zone is set as it joins (`first_zone`) and only widens as its balloon's view
changes (`follow_mems`, `memzone.realloc`: nri-plugins' libmem reallocation).
`render_changed` renders only the members of balloons whose view changed, the
decision's updates (`decide.decide`).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from nri_resmgr.model import Assignment, ContainerID, CPUKind, MemoryKind
from nri_resmgr.policy.balloons.memzone import MemZone, expand, realloc
from nri_resmgr.policy.balloons.sizing import Sizing
from nri_resmgr.policy.balloons.spec import RESERVED, BalloonType
from nri_resmgr.policy.balloons.state import BalloonsState, Member
from nri_resmgr.policy.common import one_thread_per_core
from nri_resmgr.topology.cpuset import CPUSet, IDSet, NodeSet, union

__all__ = [
    "BalloonView",
    "first_zone",
    "follow_mems",
    "hides",
    "memory_nodes",
    "render",
    "render_changed",
    "render_member",
    "views",
]

_DRAM = (MemoryKind.DRAM,)


@dataclass(frozen=True, slots=True)
class BalloonView:
    """What a balloon's containers run on: its CPUs plus shared idle ones, its memory."""

    cpus: CPUSet
    mems: NodeSet


def memory_nodes(ctx: Sizing, t: BalloonType, cpus: CPUSet, kinds: Sequence[MemoryKind]) -> NodeSet:
    pin = t.pin_memory if t.pin_memory is not None else ctx.config.options.pin_memory
    if not pin or not cpus:
        return IDSet()
    asked = tuple(kinds) or ctx.config.memory_kinds.get(t.name) or ()
    home = ctx.topology.nodes_of(cpus)
    if not asked:
        return union(ctx.topology.memory_nodes_near(n, _DRAM) for n in home) or home
    # libmem's findInitialZone: the CPUs' nodes, expanded by the nearest nodes of each
    # asked kind they lack (`memzone.expand`), keeping only the asked kinds if any
    missing = set(asked) - {ctx.topology.node(n).kind for n in home}
    zone = home | expand(ctx.topology, home, missing) if missing else home
    return IDSet(n for n in zone if ctx.topology.node(n).kind in asked) or zone


def views(ctx: Sizing, state: BalloonsState) -> dict[str, BalloonView]:
    """Every balloon's view: own CPUs plus shared idle ones, and memory nodes."""
    reserved = next((b.cpus for b in state.balloons.values() if b.type == RESERVED), None)
    out = {}
    for name, b in state.balloons.items():
        t = ctx.types[b.type]
        cpus = b.cpus | b.shared
        if not cpus:
            cpus = reserved or ctx.reserved_home
        out[name] = BalloonView(cpus=cpus, mems=memory_nodes(ctx, t, cpus, ()))
    return out


def hides(t: BalloonType, m: Member) -> bool:
    """Whether `m` sees one thread per core: its annotation, else its type's."""
    if m.hide_hyperthreads is None:
        return bool(t.hide_hyperthreads)
    return m.hide_hyperthreads


def render_member(ctx: Sizing, m: Member, view: BalloonView, t: BalloonType) -> Assignment:
    cpus = view.cpus
    if hides(t, m):
        cpus = one_thread_per_core(ctx.topology, cpus)
    if not ctx.config.options.pin_cpu:
        cpus = IDSet()
    if m.memory is not None:
        mems = m.memory.given
    else:
        mems = memory_nodes(ctx, t, view.cpus, m.memory_kinds) if m.memory_kinds else view.mems
    if m.preserve_mems:
        mems = IDSet()
    return Assignment(
        container_id=m.container_id,
        cpus=cpus,
        mems=mems,
        kind=CPUKind.RESERVED if t.name == RESERVED else CPUKind.SHARED,
        pool=m.balloon,
    )


def render(ctx: Sizing, state: BalloonsState) -> dict[ContainerID, Assignment]:
    """Every container's assignment in `state`."""
    shown = views(ctx, state)
    return {
        cid: render_member(ctx, m, shown[m.balloon], ctx.types[state.balloons[m.balloon].type])
        for cid, m in state.members.items()
    }


def render_changed(
    ctx: Sizing, old: BalloonsState, new: BalloonsState, cid: ContainerID
) -> tuple[dict[ContainerID, Assignment], dict[ContainerID, Assignment]]:
    v_old, v_new = views(ctx, old), views(ctx, new)
    changed = {n for n in v_new if v_old.get(n) != v_new[n]} | {n for n in v_old if n not in v_new}

    def pick(st: BalloonsState, shown: Mapping[str, BalloonView]) -> dict[ContainerID, Assignment]:
        out = {}
        touched = [cid] if cid in st.members else []
        for c in itertools.chain(touched, *(st.member_ids(n) for n in changed)):
            m = st.members[c]
            t = ctx.types[st.balloons[m.balloon].type]
            out[c] = render_member(ctx, m, shown[m.balloon], t)
        return out

    return pick(old, v_old), pick(new, v_new)


def first_zone(ctx: Sizing, state: BalloonsState, m: Member) -> MemZone | None:
    """`m`'s memory zone as it joins its balloon in `state`: the nodes near the
    balloon's view of the kinds it wants (None when memory is not pinned)."""
    b = state.balloons[m.balloon]
    t = ctx.types[b.type]
    view = views(ctx, state)[m.balloon]
    zone = memory_nodes(ctx, t, view.cpus, m.memory_kinds) if m.memory_kinds else view.mems
    if not zone:
        return None
    return MemZone.first(ctx.topology.nodes_of(view.cpus), zone)


def follow_mems(ctx: Sizing, old: BalloonsState, new: BalloonsState) -> BalloonsState:
    """`new` with the memory zones of the containers whose balloon changed its view
    since `old` reallocated (`memzone.realloc`: a zone only widens); a container
    that joined its balloon in between keeps the zone it joined with."""
    v_old, v_new = views(ctx, old), views(ctx, new)
    moved = []
    for name, view in v_new.items():
        if v_old.get(name) == view:
            continue
        for cid in new.member_ids(name):
            m = new.members[cid]
            was = old.members.get(cid)
            if m.memory is None or was is None or was.balloon != m.balloon:
                continue
            t = ctx.types[new.balloons[m.balloon].type]
            kinds = m.memory_kinds or ctx.config.memory_kinds.get(t.name) or ()
            nodes = ctx.topology.nodes_of(view.cpus)
            moved.append(replace(m, memory=realloc(ctx.topology, m.memory, nodes, kinds)))
    return new.with_members(moved) if moved else new
