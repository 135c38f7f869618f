"""What must hold of every balloons state (checked by the tests after every decision).

1. no CPU is in two balloons, and every balloon's CPUs are usable (available, online);
2. a balloon holds at least ``minCPUs`` and at most ``maxCPUs`` (0: no limit) CPUs,
   and exactly ``max(minCPUs, ceil(requests), 1 if it has members)`` when that is
   within ``maxCPUs``;
3. every member's balloon exists, and the member's container matches its balloon's
   type (it is the type `matching.balloon_type_of` gave it);
4. instances of a type are between ``minBalloons`` and ``maxBalloons``;
5. members of a ``groupBy`` type's balloon share one group;
6. a composite balloon's CPUs are the disjoint union of one part per component.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from nri_resmgr.policy.balloons.state import BalloonsState
from nri_resmgr.topology.cpuset import union

if TYPE_CHECKING:
    from nri_resmgr.policy.balloons.policy import BalloonsPolicy

__all__ = ["InvariantError", "check_invariants", "violations"]


class InvariantError(Exception):
    """A state breaks an invariant (a policy bug, never a user error)."""


def violations(policy: BalloonsPolicy, state: BalloonsState) -> list[str]:
    """Every invariant `state` breaks, as readable lines (empty when it keeps them all)."""
    out: list[str] = []
    held = Counter(cpu for b in state.balloons.values() for cpu in b.cpus)
    twice = sorted(cpu for cpu, n in held.items() if n > 1)
    if twice:
        out.append(f"CPUs {twice} are in more than one balloon")
    available = policy.config.available
    per_type: Counter[str] = Counter()
    for name, b in state.balloons.items():
        per_type[b.type] += 1
        if name != b.name:
            out.append(f"balloon {b.name} is filed as {name}")
        t = policy.types.get(b.type)
        if t is None:
            out.append(f"balloon {name} has unknown type {b.type}")
            continue
        if not b.cpus <= available:
            out.append(f"balloon {name} holds unavailable CPUs {b.cpus - available}")
        n = len(b.cpus)
        if n < t.min_cpus or (t.max_cpus and n > t.max_cpus):
            out.append(f"balloon {name} has {n} CPUs; expected {t.min_cpus}..{t.max_cpus or 'any'}")
        members = state.members_of(name)
        want = policy.target_cpus(t, sum(m.milli for m in members), occupied=bool(members))
        if (not t.max_cpus or want <= t.max_cpus) and n != want:
            out.append(f"balloon {name} has {n} CPUs; its requests need {want}")
        if t.components:
            parts = b.parts
            if len(parts) != len(t.components) or union(parts) != b.cpus:
                out.append(f"composite balloon {name} has parts {parts} for CPUs {b.cpus}")
            elif sum(len(x) for x in parts) != n:
                out.append(f"composite balloon {name} has overlapping parts {parts}")
        elif b.parts:
            out.append(f"balloon {name} is not composite but has parts {b.parts}")
        if t.group_by and len({m.group for m in members}) > 1:
            out.append(f"balloon {name} mixes groups {sorted({m.group for m in members})}")
    for t in policy.config.types:
        count = per_type[t.name]
        if count < t.min_balloons or (t.max_balloons and count > t.max_balloons):
            out.append(
                f"type {t.name} has {count} balloons; expected "
                f"{t.min_balloons}..{t.max_balloons or 'any'}"
            )
    for cid, m in state.members.items():
        if m.balloon not in state.balloons:
            out.append(f"container {cid} is in missing balloon {m.balloon}")
    return out


def check_invariants(policy: BalloonsPolicy, state: BalloonsState) -> None:
    """Raise `InvariantError` listing every invariant `state` breaks."""
    found = violations(policy, state)
    if found:
        raise InvariantError("; ".join(found))
