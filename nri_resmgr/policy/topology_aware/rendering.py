"""Rendering: the `Assignment` the runtime sees for each grant of a state.

Theory of operation: a container's assignment is a pure function of its grant, of its
pool's shared set in the state's supply (SHARED and MIXED grants only) and of the fixed
tree and topology.  ``hide-hyperthreads``, ``pinCPU``/``pinMemory`` and the preserve
annotations are applied only here.  `render_changed` renders, for a decision's diff,
only the containers whose rendering can differ between two states.

Since a rendering is a function of the grant and its pool's shared set (the tree and the
topology are the policy's), `RenderMemo` keeps each container's last rendering with the
two objects it was made of and renders again only for another grant or shared set: an
exclusive decision renders its pool's shared containers in the old state, whose shared
set is the one the decision before rendered them with (half of its renderings).

The other half, the new state's, is the same placement for every shared container of
the pool that asks alike: a SHARED grant renders from its pool, its pool's shared set
and four request fields (`_shape`), never from the container.  `RenderMemo.render_many`
renders one container of each shape and gives the others that placement under their
own id (at 1,000 live, 226 renderings of one or two shapes per exclusive decision).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from nri_resmgr.model import Assignment, ContainerID, CPUKind
from nri_resmgr.policy.common import one_thread_per_core
from nri_resmgr.policy.topology_aware.pools import Pool, PoolTree
from nri_resmgr.policy.topology_aware.preferences import ContainerRequest
from nri_resmgr.policy.topology_aware.state import Grant, Supply, TopologyAwareState
from nri_resmgr.topology.cpuset import CPUSet, IDSet, NodeSet, union
from nri_resmgr.topology.model import Topology

__all__ = ["RenderMemo", "pinned_mems", "render", "render_all", "render_changed"]


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


class RenderMemo:
    """`render` per container, made again only when its grant or its pool's shared set
    is another object (module docstring); forgets everything when it holds more than
    twice the live grants (plus `SLACK`), so it stays within the live set.  One memo
    per policy (one tree and topology)."""

    SLACK = 64

    def __init__(self) -> None:
        self._kept: dict[ContainerID, tuple[Grant, CPUSet, Assignment]] = {}

    def render(
        self, *, tree: PoolTree, topology: Topology, state: TopologyAwareState, cid: ContainerID
    ) -> Assignment:
        """`render` of `cid`'s grant in `state`."""
        grant = state.grants[cid]
        shared = state.supply.shared[grant.pool]
        kept = self._kept.get(cid)
        if kept is not None and kept[0] is grant and kept[1] is shared:
            return kept[2]
        if len(self._kept) > 2 * len(state.grants) + self.SLACK:
            self._kept.clear()
        out = render(tree=tree, topology=topology, supply=state.supply, grant=grant)
        self._kept[cid] = (grant, shared, out)
        return out

    def render_many(
        self,
        *,
        tree: PoolTree,
        topology: Topology,
        state: TopologyAwareState,
        cids: Iterable[ContainerID],
    ) -> dict[ContainerID, Assignment]:
        """`render` of each of `cids` in `state` (in that order), one rendering per
        `_shape` made (module docstring)."""
        if len(self._kept) > 2 * len(state.grants) + self.SLACK:
            self._kept.clear()
        grants, supply, kept = state.grants, state.supply, self._kept
        shapes: dict[tuple[object, ...], Assignment] = {}
        out: dict[ContainerID, Assignment] = {}
        for cid in cids:
            grant = grants[cid]
            shared = supply.shared[grant.pool]
            mine = kept.get(cid)
            if mine is not None and mine[0] is grant and mine[1] is shared:
                out[cid] = mine[2]
                continue
            if grant.kind is CPUKind.SHARED:
                shape = _shape(grant)
                like = shapes.get(shape)
                if like is None:
                    like = shapes[shape] = render(
                        tree=tree, topology=topology, supply=supply, grant=grant
                    )
                    a = like
                else:
                    a = Assignment(cid, like.cpus, like.mems, like.kind, like.pool)
            else:
                a = render(tree=tree, topology=topology, supply=supply, grant=grant)
            kept[cid] = (grant, shared, a)
            out[cid] = a
        return out


def _shape(grant: Grant) -> tuple[object, ...]:
    """What a SHARED grant's rendering is made of besides its pool's shared set (`render`):
    grants of one shape in one state render alike but for the container id."""
    req = grant.request
    return (grant.pool, req.hide_hyperthreads, req.pin_cpu, req.pin_memory, req.memory_kinds)


def render_changed(
    topology: Topology,
    old: TopologyAwareState,
    new: TopologyAwareState,
    touched: Collection[ContainerID],
    memo: RenderMemo | None = None,
) -> tuple[dict[ContainerID, Assignment], dict[ContainerID, Assignment]]:
    """Renderings in `old` and in `new` of every container whose rendering can differ.

    Between two states (of one tree) in which only the grants of `touched` differ, the
    containers whose renderings can differ are the touched ones and the shared users of
    the pools whose shared set changed.  Finding those pools compares the two supplies
    (O(pools)); only when some changed are their shared users looked up (the supply's
    ``users`` index) and (inherently) re-rendered.  Any other container renders the same
    in both states, so `diff_updates` over these two maps equals `diff_updates` over
    `render_all` of both states, at O(what changed) cost.
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
    old_grants = old.grants
    for pool in changed:
        cids.update(cid for cid in after_supply.users[pool] if cid in old_grants)
    order = sorted(cids)

    def rendered(state: TopologyAwareState) -> dict[ContainerID, Assignment]:
        grants = state.grants
        if memo is not None:
            present = [cid for cid in order if cid in grants]
            return memo.render_many(tree=tree, topology=topology, state=state, cids=present)
        return {
            cid: render(tree=tree, topology=topology, supply=state.supply, grant=grants[cid])
            for cid in order
            if cid in grants
        }

    return rendered(old), rendered(new)
