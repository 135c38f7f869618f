"""The plumbing of a rebuild (Synchronize) every placement policy shares.

Theory of operation: a rebuild reads what the runtime reports (each container's current
CPUs and memory), reconstructs a state that keeps valid placements where they are, and
renders it.  Three steps are the same in every policy:

- `each_once`: a runtime may list a container twice; it counts once, as first listed;
- `holders_per_cpu`: how many reports hold each CPU, to tell a claim nobody contests
  from one another report overlaps (`common.order_claims` and the policies' own claim
  rules read it);
- `moved`: the rendering of every container whose rendering differs from its report
  (`decide.differs_from_current`): the updates of the rebuild, so that afterwards every
  container runs where the rebuilt state says.

And the one rule of a restart with placement records (issue 24), `restart`, written here
once for every policy (a policy supplies only `Policy.record`, `Policy.record_layout`
and `Policy.restore`):

1. a record counts only for a container the runtime reports with exactly the cpuset and
   memory nodes the record holds (*matched*; an empty set in a record was never set, so
   the runtime's report of it, the kubelet's, is not the daemon's to compare); a record
   of a container not reported is dropped (it went away while the daemon was down);
2. the matched containers are restored (`Policy.restore`, with the policy's layout
   record when it keeps one: `Policy.record_layout`), and the restored state must pass
   the policy's invariants (`Policy.check`) and render every matched container exactly
   as reported, and no other; otherwise no record counts (with no container reported,
   a layout alone is restored so: the balloons no container holds);
3. every reported container matched: the restored state, with no update (an idle
   restart moves nothing, by construction);
4. the others are containers no record names (created while the daemon was down, a
   runtime failing open): each is placed on the restored state as a creation would place
   it (`Policy.allocate`, in the report's order), and the updates are the renderings
   that differ from the reports (that container, and any its placement moves);
5. anything else (a record that does not match its report: changed by someone else, or a
   decision the runtime never applied; records the policy cannot read; an allocation
   that fails) is today's `Policy.rebuild` of every container, with the cause in the
   decision's reason.

So a record can only choose among readings of what the runtime reports; it can never
place a container anywhere but where the runtime says it is.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from nri_resmgr.model import (
    Assignment,
    ContainerID,
    ContainerInfo,
    Decision,
    ResmgrError,
)
from nri_resmgr.policy.base import Policy
from nri_resmgr.policy.decide import differs_from_current
from nri_resmgr.policy.kit.records import LAYOUT, PlacementRecord
from nri_resmgr.topology.cpuset import CPUSet, IDSet

__all__ = ["RESTORED", "each_once", "holders_per_cpu", "moved", "records_of", "restart"]

#: the reason of a restart every record of which counted
RESTORED = "restored from placement records"


def each_once(containers: Iterable[ContainerInfo]) -> list[ContainerInfo]:
    """`containers`, each id once, as first listed, in the runtime's order."""
    unique: dict[ContainerID, ContainerInfo] = {}
    for c in containers:
        unique.setdefault(c.id, c)
    return list(unique.values())


def holders_per_cpu(cpusets: Iterable[CPUSet | None]) -> Counter[int]:
    """How many of `cpusets` hold each CPU (None holds none)."""
    return Counter(cpu for cpus in cpusets if cpus for cpu in cpus)


def moved(
    containers: Iterable[ContainerInfo], rendered: Mapping[ContainerID, Assignment]
) -> tuple[Assignment, ...]:
    """The renderings of `containers` that differ from their reports, in their order (a
    container `rendered` lacks is left alone)."""
    return tuple(
        rendered[c.id]
        for c in containers
        if c.id in rendered and differs_from_current(c, rendered[c.id])
    )


def records_of(
    policy: Policy, state: Any, assignments: Mapping[ContainerID, Assignment]
) -> dict[ContainerID, PlacementRecord]:
    """The record of each of `assignments` (what the runtime was told) that `policy`
    records in `state` (`Policy.record`), and the policy's layout record, under `LAYOUT`,
    when it keeps one (`Policy.record_layout`)."""
    out = {}
    for cid, a in assignments.items():
        meaning = policy.record(state, cid)
        if meaning is not None and cid != LAYOUT:
            out[cid] = PlacementRecord(cid, a.cpus, a.mems, meaning)
    layout = policy.record_layout(state)
    if layout is not None:
        out[LAYOUT] = PlacementRecord(LAYOUT, IDSet(), IDSet(), layout)
    return out


def _matches(c: ContainerInfo, r: PlacementRecord) -> bool:
    """Whether `c`'s report is what `r` holds; an empty set in a record was not set
    (``pinCPU: false``, memory not pinned), so any report matches it, as the
    rendering of an empty set changes no report (`decide.differs_from_current`)."""
    return _same(c.current_cpus, r.cpus) and _same(c.current_mems, r.mems)


def _same(reported: IDSet | None, recorded: IDSet) -> bool:
    return not recorded or (reported or IDSet()) == recorded


def restart(
    policy: Policy,
    containers: Sequence[ContainerInfo],
    records: Mapping[ContainerID, PlacementRecord],
) -> Decision[Any]:
    """Synchronize with placement `records` (the module docstring's rule)."""
    containers = each_once(containers)
    kept = records.get(LAYOUT)
    layout = kept.meaning if kept is not None else None
    records = {cid: r for cid, r in records.items() if cid != LAYOUT}
    matched: list[ContainerInfo] = []
    stale: list[ContainerID] = []
    for c in containers:
        r = records.get(c.id)
        if r is not None and _matches(c, r):
            matched.append(c)
        elif r is not None:
            stale.append(c.id)
    if not containers and layout is None:
        return policy.rebuild(containers)
    if stale:
        why = f"{len(stale)} record(s) differ from the report (first {stale[0]})"
        return _rebuilt(policy, containers, why)
    if not matched and layout is None:
        return _rebuilt(
            policy,
            containers,
            "no placement records" if not records else "no record names a reported container",
        )
    try:
        state = policy.restore([(c, records[c.id].meaning) for c in matched], layout)
        policy.check(state)
    except (ResmgrError, AssertionError) as exc:
        return _rebuilt(policy, containers, f"records not used: {exc}")
    rendered = policy.render(state) or {}
    if set(rendered) != {c.id for c in matched} or moved(matched, rendered):
        return _rebuilt(policy, containers, "records not used: the restored state differs")
    fresh = [c for c in containers if c.id not in records]
    if not fresh:
        return Decision(state=state, updates=(), reason=RESTORED)
    try:
        for c in fresh:
            state = policy.allocate(state, c).state
        policy.check(state)
    except (ResmgrError, AssertionError) as exc:
        return _rebuilt(policy, containers, f"records not used: {exc}")
    rendered = policy.render(state) or {}
    names = ", ".join(c.id for c in fresh[:3])
    reason = f"{RESTORED}; placed {len(fresh)} unrecorded container(s) ({names})"
    return Decision(state=state, updates=moved(containers, rendered), reason=reason)


def _rebuilt(policy: Policy, containers: Sequence[ContainerInfo], why: str) -> Decision[Any]:
    d = policy.rebuild(containers)
    return Decision(state=d.state, updates=d.updates, reason=f"{d.reason}; {why}")
