"""Invariants of the topology-aware state: what must hold after every decision.

Theory of operation: `invariant_problems` lists, as messages, every broken invariant of
a state:

- no CPU is held exclusively by two containers;
- exclusive CPUs are inside their pool, never reserved, and isolated grants hold only
  isolated CPUs (other exclusive grants none);
- exclusive and shared sets are disjoint, every pool with shared containers in its
  subtree (SHARED or MIXED, even of 0m) still has shared CPUs, and each pool's shared
  demand fits its shared set (`Supply.need`); a pool nobody shares may be sliced empty;
- the reserved containers' millicores fit the reserved capacity
  (``reservedResources.cpu``: 750m is 750m);
- every pinned container's CPUs are non-empty and online; memory demand fits.

The checks *return* their problems; only `check_invariants` (for tests and the
simulator) turns them into an `InvariantError`.  `check_addition` is the same question
for one more grant on a state already known to be valid, at the cost of what the grant
changes: rebuild asks it for every placement it keeps.
"""

from __future__ import annotations

from collections.abc import Mapping

from nri_resmgr.model import Assignment, ContainerID, CPUKind
from nri_resmgr.policy.topology_aware.pools import PoolTree
from nri_resmgr.policy.topology_aware.rendering import render_all, render_changed
from nri_resmgr.policy.topology_aware.state import Grant, Supply, TopologyAwareState
from nri_resmgr.topology.cpuset import CPUSet
from nri_resmgr.topology.model import Topology

__all__ = ["InvariantError", "check_addition", "check_invariants", "invariant_problems"]


class InvariantError(AssertionError):
    """A state that breaks one of the allocator's invariants."""


def invariant_problems(
    topology: Topology,
    state: TopologyAwareState,
    *,
    rendered: Mapping[ContainerID, Assignment] | None = None,
) -> tuple[str, ...]:
    """Every broken invariant of `state` (module docstring), as messages; () if none.
    `rendered`: every container's rendering in `state`, when the caller has it (the
    policy's memo); else `render_all`."""
    tree = state.tree
    problems: list[str] = []
    seen: dict[int, ContainerID] = {}
    for cid, g in sorted(state.grants.items()):
        for c in g.exclusive:
            if c in seen:
                problems.append(f"cpu {c} is exclusive to both {seen[c]} and {cid}")
            seen[c] = cid
        problems.extend(_grant_problems(tree, topology, cid, g))
    problems.extend(_pool_problems(tree, state.supply))
    online = topology.online_cpus()
    if rendered is None:
        rendered = render_all(topology, state)
    for cid, a in sorted(rendered.items()):
        problems.extend(_render_problems(online, cid, state.grants[cid], a))
    return tuple(problems)


def check_invariants(
    topology: Topology,
    state: TopologyAwareState,
    *,
    rendered: Mapping[ContainerID, Assignment] | None = None,
) -> None:
    """Raise `InvariantError` listing every broken invariant of `state` (`rendered` as
    `invariant_problems` takes it)."""
    problems = invariant_problems(topology, state, rendered=rendered)
    if problems:
        raise InvariantError("; ".join(problems))


def check_addition(topology: Topology, state: TopologyAwareState, grant: Grant) -> tuple[str, ...]:
    """`invariant_problems` of `state.with_grant(grant)`, for a `state` that has none.

    Finds problems (those the new grant brings) exactly when the full check of the
    larger state would, but in O(pools + containers re-rendered) instead of O(all
    containers): in a valid state the problems can only come from the new grant itself,
    from the per-pool figures (all checked), and from the renderings that change (the new
    container and the shared users of pools whose shared set changed, `render_changed`).
    A grant that replaces one of the same container gets the full check.
    """
    trial = state.with_grant(grant)
    if grant.container_id in state.grants:
        return invariant_problems(topology, trial)
    tree = state.tree
    problems: list[str] = []
    cid = grant.container_id
    for c in grant.exclusive & state.supply.used:
        holder = next(k for k, g in sorted(state.grants.items()) if c in g.exclusive)
        problems.append(f"cpu {c} is exclusive to both {holder} and {cid}")
    problems.extend(_grant_problems(tree, topology, cid, grant))
    problems.extend(_pool_problems(tree, trial.supply))
    online = topology.online_cpus()
    _, rendered = render_changed(topology, state, trial, (cid,))
    for other, a in rendered.items():
        problems.extend(_render_problems(online, other, trial.grants[other], a))
    return tuple(problems)


def _grant_problems(tree: PoolTree, topology: Topology, cid: ContainerID, g: Grant) -> list[str]:
    """What is wrong with one grant on its own (module docstring)."""
    problems: list[str] = []
    pool = tree.pools[g.pool]
    if not g.exclusive <= pool.cpus:
        problems.append(f"{cid}: exclusive {g.exclusive} outside pool {pool.name}")
    if not g.exclusive.isdisjoint(tree.reserved):
        problems.append(f"{cid}: exclusive {g.exclusive} includes reserved CPUs")
    if g.kind is CPUKind.ISOLATED and not g.exclusive <= pool.isolated:
        problems.append(f"{cid}: isolated grant {g.exclusive} holds non-isolated CPUs")
    if g.kind in (CPUKind.EXCLUSIVE, CPUKind.ISOLATED, CPUKind.MIXED):
        if len(g.exclusive) != g.request.full:
            problems.append(f"{cid}: holds {len(g.exclusive)} CPUs for {g.request.full}")
    elif g.exclusive:
        problems.append(f"{cid}: {g.kind} grant holds exclusive CPUs {g.exclusive}")
    return problems


def _pool_problems(tree: PoolTree, supply: Supply) -> list[str]:
    """What is wrong with the per-pool figures (module docstring)."""
    problems: list[str] = []
    for p in tree.pools:
        shared = supply.shared[p.index]
        if not shared.isdisjoint(supply.used):
            problems.append(f"{p.name}: shared {shared} overlaps exclusive {supply.used}")
        if supply.sharers[p.index] and not shared:
            problems.append(
                f"{p.name}: shared set is empty under {supply.sharers[p.index]} shared containers"
            )
        if supply.demand[p.index] > 1000 * len(shared):
            problems.append(
                f"{p.name}: shared demand {supply.demand[p.index]}m exceeds {len(shared)} CPUs"
            )
        if supply.memory[p.index] > sum(p.memory_bytes.values()):
            problems.append(f"{p.name}: memory demand {supply.memory[p.index]} exceeds supply")
    if supply.reserved_demand > tree.reserved_milli:
        problems.append(
            f"reserved demand {supply.reserved_demand}m exceeds the reserved capacity "
            f"{tree.reserved_milli}m of {tree.reserved}"
        )
    return problems


def _render_problems(online: CPUSet, cid: ContainerID, g: Grant, a: Assignment) -> list[str]:
    """What is wrong with one container's rendering (module docstring)."""
    problems: list[str] = []
    if g.kind is not CPUKind.NONE and g.request.pin_cpu and not a.cpus:
        problems.append(f"{cid}: pinned to no CPUs")
    if not a.cpus <= online:
        problems.append(f"{cid}: CPUs {a.cpus - online} are not online")
    return problems
