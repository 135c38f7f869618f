"""Rendering: the `Assignment` the runtime sees for each grant of a state.

Theory of operation: a container's assignment is a pure function of its grant, of its
pool's shared set in the state's supply (SHARED and MIXED grants only) and of the fixed
tree and topology.  ``hide-hyperthreads``, ``pinCPU``/``pinMemory`` and the preserve
annotations are applied only here.  `render_changed` renders, for a decision's diff,
only the containers whose rendering can differ between two states.
"""

from __future__ import annotations

from collections.abc import Collection

from nri_resmgr.model import Assignment, ContainerID, CPUKind
from nri_resmgr.policy.common import one_thread_per_core
from nri_resmgr.policy.topology_aware.pools import Pool, PoolTree
from nri_resmgr.policy.topology_aware.preferences import ContainerRequest
from nri_resmgr.policy.topology_aware.state import (
    SHARED_USERS,
    Grant,
    Supply,
    TopologyAwareState,
)
from nri_resmgr.topology.cpuset import IDSet, NodeSet, union
from nri_resmgr.topology.model import Topology

__all__ = ["pinned_mems", "render", "render_all", "render_changed"]


def pinned_mems(
    tree: PoolTree, topology: Topology, pool: Pool, kind: CPUKind, req: ContainerRequest
) -> NodeSet:
    """The memory nodes a grant of `kind` for `req` in `pool` renders when its memory is
    pinned; also what a rebuild compares a report's memory nodes with
    (`reports.hint_for`, `rebuild.Rebuilder._reclaim`), so that a placement rendered
    here is read back as the same placement."""
    if kind is CPUKind.NONE:
        # cpu.preserve: no CPUs are pinned, so no pool's CPUs bound the memory either:
        # every memory node of its kinds, as nri-plugins' machine root pool gives
        # (n4c16/test11-reserved-cpu-annotations, pod3c0: 4 nodes with 4 CPUs available)
        return union(topology.nodes_of_kind(k) for k in req.memory_kinds)
    if kind is CPUKind.RESERVED:
        # nri-plugins offers a reserved container the memory of the root pool, whatever
        # pool holds the reserved CPUs (`allocatePool` takes ``p.root`` for cpuReserved
        # and asks libmem for the root's memory of the container's types)
        return tree.root.mems_of(req.memory_kinds)
    return pool.offer_mems_of(req.memory_kinds)


def render(*, tree: PoolTree, topology: Topology, supply: Supply, grant: Grant) -> Assignment:
    """The assignment the runtime should apply for `grant` (module docstring)."""
    pool = tree.pools[grant.pool]
    req = grant.request
    if grant.kind is CPUKind.SHARED:
        cpus = supply.shared[pool.index]
    elif grant.kind in (CPUKind.EXCLUSIVE, CPUKind.ISOLATED):
        cpus = grant.exclusive
    elif grant.kind is CPUKind.MIXED:
        cpus = grant.exclusive | supply.shared[pool.index]
    elif grant.kind is CPUKind.RESERVED:
        cpus = tree.reserved
    else:
        cpus = IDSet()
    if req.hide_hyperthreads:
        cpus = one_thread_per_core(topology, cpus)
    if not req.pin_cpu:
        cpus = IDSet()
    mems = pinned_mems(tree, topology, pool, grant.kind, req) if req.pin_memory else IDSet()
    return Assignment(
        container_id=grant.container_id, cpus=cpus, mems=mems, kind=grant.kind, pool=pool.name
    )


def render_all(topology: Topology, state: TopologyAwareState) -> dict[ContainerID, Assignment]:
    """Every container's assignment in `state`."""
    tree, supply = state.tree, state.supply
    return {
        cid: render(tree=tree, topology=topology, supply=supply, grant=g)
        for cid, g in state.grants.items()
    }


def render_changed(
    topology: Topology,
    old: TopologyAwareState,
    new: TopologyAwareState,
    touched: Collection[ContainerID],
) -> tuple[dict[ContainerID, Assignment], dict[ContainerID, Assignment]]:
    """Renderings in `old` and in `new` of every container whose rendering can differ.

    Between two states (of one tree) in which only the grants of `touched` differ, the
    containers whose renderings can differ are the touched ones and the shared users of
    the pools whose shared set changed.  Finding those pools compares the two supplies
    (O(pools)); only when some changed are the grants scanned for their shared users, and
    those (inherently) re-rendered.  Any other container renders the same in both states,
    so `diff_updates` over these two maps equals `diff_updates` over `render_all` of both
    states, at O(what changed) cost.
    """
    tree = new.tree
    before_supply = old.supply
    after_supply = new.supply
    changed = {
        p.index
        for p in tree.pools
        if before_supply.shared[p.index] is not after_supply.shared[p.index]
        and before_supply.shared[p.index] != after_supply.shared[p.index]
    }
    cids = {cid for cid in touched if cid in old.grants or cid in new.grants}
    if changed:
        cids.update(
            cid
            for cid, g in new.grants.items()
            if g.pool in changed and g.kind in SHARED_USERS and cid in old.grants
        )

    def rendered(state: TopologyAwareState) -> dict[ContainerID, Assignment]:
        return {
            cid: render(tree=tree, topology=topology, supply=state.supply, grant=state.grants[cid])
            for cid in sorted(cids)
            if cid in state.grants
        }

    return rendered(old), rendered(new)
