"""Balloons as placement records, and back (issue 24).

Theory of operation: a rebuild from bare cpusets must guess which balloon each group of
containers was in, where the balloons no container is in (the reserved balloon,
``minBalloons``) were, which component a ``balance-balloons`` composite had, which idle
CPUs each balloon shared, and how far each memory zone had widened.  A record says so
instead, in two parts:

- a container's record (`member_meaning`): its balloon's type and instance, and its
  memory zone (the nodes first asked for, the zone, the nodes given) when it has one.
  The rest of a member (its request, ``groupBy`` group, annotations, devices) is read
  from the container again, as every decision reads it (`rebuild.rebuild_member`:
  unreadable annotations put it in the default type, as the rebuild that placed it
  did);
- the policy's layout (`layout_meaning`, `kit.records.LAYOUT`): every balloon in the
  state's order (nri-plugins' list of balloons, which breaks the fill chain's ties),
  each with its type, instance, CPUs, shared idle CPUs and the number of containers in
  it, and its components, recursively, each with its type, instance and CPUs.  The
  fields are flat: balloon ``i`` is ``b{i}``, its component ``j`` ``b{i}.{j}``.

`restored` reads both back into a state, refusing with a `RecordError` a field that
cannot be read, a balloon type the configuration has not, a balloon named twice, a
container recorded in a balloon the layout lacks, one now preserved or of another type,
and a balloon whose recorded containers are not all there (one went away while the
daemon was down: the balloon was sized for it).  Whether the balloons together are a
valid state is the invariants' question, and whether they render every container as
the runtime reports it the kit's (`kit.rebuild.restart`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from nri_resmgr.model import ContainerID, ContainerInfo
from nri_resmgr.policy.balloons.memzone import MemZone
from nri_resmgr.policy.balloons.placement import preserved
from nri_resmgr.policy.balloons.rebuild import rebuild_member
from nri_resmgr.policy.balloons.sizing import NO_CPUS, Sizing
from nri_resmgr.policy.balloons.state import Balloon, BalloonsState, Member, balloon_name
from nri_resmgr.policy.kit.records import Meaning, MeaningFields, RecordError

__all__ = ["layout_meaning", "member_meaning", "restored"]

#: the layout's subject in messages
_LAYOUT = "the balloons layout record"


def member_meaning(state: BalloonsState, m: Member) -> Meaning:
    """The record of member `m` of `state`."""
    b = state.balloons[m.balloon]
    out: dict[str, int | str | bool] = {"type": b.type, "instance": b.instance}
    if m.memory is not None:
        out["mem_affinity"] = str(m.memory.affinity)
        out["mem_zone"] = str(m.memory.zone)
        out["mem_given"] = str(m.memory.given)
    return out


def layout_meaning(state: BalloonsState) -> Meaning:
    """The layout record of `state` (module docstring)."""
    out: dict[str, int | str | bool] = {"balloons": len(state.balloons)}
    for i, b in enumerate(state.balloons.values()):
        key = f"b{i}"
        _put(out, key, b)
        out[f"{key}.shared"] = str(b.shared)
        out[f"{key}.members"] = state.member_count(b.name)
    return out


def _put(out: dict[str, int | str | bool], key: str, b: Balloon) -> None:
    out[f"{key}.type"] = b.type
    out[f"{key}.instance"] = b.instance
    out[f"{key}.cpus"] = str(b.cpus)
    out[f"{key}.components"] = len(b.components)
    for j, comp in enumerate(b.components):
        _put(out, f"{key}.{j}", comp)


def restored(
    ctx: Sizing, containers: Sequence[tuple[ContainerInfo, Meaning]], layout: Meaning | None
) -> BalloonsState:
    """The state `layout` and the containers' records describe (module docstring)."""
    if layout is None:
        raise RecordError(f"{_LAYOUT} is missing; expected one with the containers' records")
    fields = MeaningFields(_LAYOUT, layout)
    balloons: dict[str, Balloon] = {}
    counts: dict[str, int] = {}
    for i in range(fields.integer("balloons")):
        key = f"b{i}"
        b = replace(_balloon(ctx, fields, key, depth=0), shared=fields.ids(f"{key}.shared"))
        if b.name in balloons:
            raise RecordError(f"{_LAYOUT}: balloon {b.name} recorded twice")
        balloons[b.name] = b
        counts[b.name] = fields.integer(f"{key}.members")
    fields.all_read()
    members: dict[ContainerID, Member] = {}
    for c, meaning in containers:
        members[c.id] = _member(ctx, c, meaning, balloons)
    held: dict[str, int] = dict.fromkeys(balloons, 0)
    for m in members.values():
        held[m.balloon] += 1
    for name, n in counts.items():
        if held[name] != n:
            raise RecordError(
                f"{_LAYOUT}: balloon {name} held {n} container(s); {held[name]} reported "
                "with their records (one went away, or its record did not match)"
            )
    return BalloonsState(balloons=balloons, members=members)


def _balloon(ctx: Sizing, fields: MeaningFields, key: str, *, depth: int) -> Balloon:
    """The balloon (a component when `depth` > 0) recorded under `key`."""
    if depth > len(ctx.types):
        raise RecordError(f"{_LAYOUT}: {key} nests components deeper than any type does")
    tname = fields.text(f"{key}.type")
    if tname not in ctx.types:
        raise RecordError(
            f"{_LAYOUT}: {key} has balloon type {tname!r}; expected one of {sorted(ctx.types)}"
        )
    instance = fields.integer(f"{key}.instance")
    if instance < 0:
        raise RecordError(f"{_LAYOUT}: {key} has instance {instance}; expected 0 or more")
    comps = tuple(
        _balloon(ctx, fields, f"{key}.{j}", depth=depth + 1)
        for j in range(fields.integer(f"{key}.components"))
    )
    return Balloon(
        type=tname,
        instance=instance,
        cpus=fields.ids(f"{key}.cpus"),
        components=comps,
        shared=NO_CPUS,
    )


def _member(
    ctx: Sizing, c: ContainerInfo, meaning: Meaning, balloons: Mapping[str, Balloon]
) -> Member:
    """`c` as a member of the balloon its record names."""
    fields = MeaningFields(c.pretty, meaning)
    name = balloon_name(fields.text("type"), fields.integer("instance"))
    b = balloons.get(name)
    if b is None:
        raise RecordError(f"{c.pretty}: recorded in balloon {name}; the layout has no such")
    why = preserved(ctx, c)
    if why is not None:
        raise RecordError(f"{c.pretty}: recorded in balloon {name}; now {why}")
    t, m = rebuild_member(ctx, c, [])
    if t.name != b.type:
        raise RecordError(f"{c.pretty}: recorded in balloon {name}; its type now is {t.name}")
    memory = None
    if "mem_zone" in meaning:
        memory = MemZone(
            affinity=fields.ids("mem_affinity"),
            zone=fields.ids("mem_zone"),
            given=fields.ids("mem_given"),
        )
    fields.all_read()
    return replace(m, balloon=name, memory=memory)
