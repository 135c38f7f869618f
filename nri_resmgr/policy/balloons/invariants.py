"""What must hold of every balloons state (checked by the tests after every decision).

1. no CPU is in two balloons, and every balloon's CPUs are usable (available, online);
   a composite balloon and its components count as one balloon: the state's balloons
   are the top-level ones, and the components split their composite's CPUs;
2. a balloon holds at least ``minCPUs`` and at most ``maxCPUs`` (0: no limit) CPUs,
   and exactly what its requests need (`sizing.Sizing.needed_cpus`) when that is
   within ``maxCPUs``: ``max(minCPUs, ceil(requests), 1 if it has members)`` when plain;
3. every member's balloon exists, and the member's container matches its balloon's
   type (it is the type `matching.balloon_type_of` gave it);
4. instances of a type are between ``minBalloons`` and ``maxBalloons``;
5. members of a ``groupBy`` type's balloon share one group;
6. a composite balloon's CPUs are the disjoint union of its components' CPUs, its
   components are of its type's component types (all of them, in order, or with
   ``componentCreation: balance-balloons`` one of them), each sized for its share
   (`sizing.Sizing.component_share`), recursively; a plain balloon has no components;
7. a balloon shares idle CPUs only (in no balloon, not kernel-isolated), and only when
   its type has ``shareIdleCPUsInSame``; components share none.
"""

from __future__ import annotations

from collections import Counter

from nri_resmgr.policy.balloons.sizing import Sizing
from nri_resmgr.policy.balloons.spec import ComponentCreation
from nri_resmgr.policy.balloons.state import Balloon, BalloonsState
from nri_resmgr.topology.cpuset import IDSet, union

__all__ = ["InvariantError", "check_invariants", "violations"]


class InvariantError(Exception):
    """A state breaks an invariant (a policy bug, never a user error)."""


def violations(policy: Sizing, state: BalloonsState) -> list[str]:
    """Every invariant `state` breaks, as readable lines (empty when it keeps them all)."""
    out: list[str] = []
    held = Counter(cpu for b in state.balloons.values() for cpu in b.cpus)
    twice = sorted(cpu for cpu, n in held.items() if n > 1)
    if twice:
        out.append(f"CPUs {twice} are in more than one balloon")
    available = policy.config.available
    shareable = available - state.used - policy.topology.isolated_cpus()
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
        if not b.shared <= (shareable if t.share_idle_cpus_in_same is not None else IDSet()):
            out.append(f"balloon {name} shares CPUs {b.shared} it may not share")
        if any(c.shared for c in b.walk() if c is not b):
            out.append(f"balloon {name} has components that share idle CPUs")
        n = len(b.cpus)
        if n < t.min_cpus or (t.max_cpus and n > t.max_cpus):
            out.append(f"balloon {name} has {n} CPUs; expected {t.min_cpus}..{t.max_cpus or 'any'}")
        members = state.members_of(name)
        milli = sum(m.milli for m in members)
        want = policy.needed_cpus(b, milli, occupied=bool(members))
        if (not t.max_cpus or want <= t.max_cpus) and n != want:
            out.append(f"balloon {name} has {n} CPUs; its requests need {want}")
        out.extend(_composite_violations(policy, b, milli, name, occupied=bool(members)))
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


def _composite_violations(
    policy: Sizing, b: Balloon, milli: int, where: str, *, occupied: bool
) -> list[str]:
    """Invariant 6 for `b` (sized for `milli`) and its components, recursively."""
    t = policy.types.get(b.type)
    if t is None:
        return [f"{where}: component {b.name} has unknown type {b.type}"]
    if not t.components:
        if b.components:
            return [f"{where}: {b.name} is not composite but has components"]
        return []
    out: list[str] = []
    kinds = [c.type for c in b.components]
    wanted = [c.balloon_type for c in t.components]
    if t.component_creation == ComponentCreation.BALANCE_BALLOONS:
        if len(kinds) != 1 or kinds[0] not in wanted:
            out.append(f"{where}: {b.name} has components {kinds}; expected one of {wanted}")
    elif kinds != wanted:
        out.append(f"{where}: {b.name} has components {kinds}; expected {wanted}")
    if not kinds:
        return out
    if union(c.cpus for c in b.components) != b.cpus:
        out.append(f"{where}: {b.name} holds {b.cpus}, its components other CPUs")
    elif sum(len(c.cpus) for c in b.components) != len(b.cpus):
        out.append(f"{where}: the components of {b.name} overlap")
    share = policy.component_share(b, milli)
    for c in b.components:
        ct = policy.types.get(c.type)
        need = policy.needed_cpus(c, share, occupied=occupied) if ct is not None else 0
        if ct is not None and (not ct.max_cpus or need <= ct.max_cpus) and len(c.cpus) != need:
            out.append(
                f"{where}: component {c.name} has {len(c.cpus)} CPUs; its share needs {need}"
            )
        out.extend(_composite_violations(policy, c, share, where, occupied=occupied))
    return out


def check_invariants(policy: Sizing, state: BalloonsState) -> None:
    """Raise `InvariantError` listing every invariant `state` breaks."""
    found = violations(policy, state)
    if found:
        raise InvariantError("; ".join(found))
