"""The memory nodes a balloon's container keeps as its balloon changes: nri-plugins' libmem
zones, as the balloons plugin uses them.

Theory of operation: a container joining a balloon gets a *zone*, the memory nodes
near the balloon's CPUs (and shared idle CPUs) of the kinds it wants
(`MemZone.first`).  When the balloon's CPUs later change, the container's zone is
*reallocated* (`realloc`, libmem's ``Realloc``) with the nodes of the balloon's new
CPUs (``closestMems``: the nodes holding any of them) and the kinds it asked for:

- nodes equal to those it first asked for, or already in its zone with its kinds:
  nothing changes (a zone never shrinks);
- otherwise the zone takes those nodes plus, for each kind (with no kinds asked for,
  the kinds of those nodes), the nearest nodes of that kind not yet in it
  (`expand`, libmem's ``defaultExpand``): a balloon growing onto a second node gives
  its containers that node and its nearest neighbours;
- when no such neighbour is left the reallocation fails, and nri-plugins gives the
  container the balloon's nodes as they are, its zone unchanged.

Memory capacity (libmem's overcommit handling, which may move zones when memory
limits exceed a zone's memory) is not modelled.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from nri_resmgr.model import MemoryKind
from nri_resmgr.topology.cpuset import IDSet, NodeSet
from nri_resmgr.topology.model import Topology

__all__ = ["MemZone", "expand", "realloc"]


@dataclass(frozen=True, slots=True)
class MemZone:
    """A container's memory zone: the nodes it first asked for, its zone, and the
    nodes it was last given (its zone, unless a reallocation failed)."""

    affinity: NodeSet
    zone: NodeSet
    given: NodeSet

    @classmethod
    def first(cls, affinity: NodeSet, zone: NodeSet) -> MemZone:
        """The zone of a container joining a balloon whose CPUs are on `affinity`."""
        return cls(affinity=affinity, zone=zone, given=zone)


def _kinds(topology: Topology, nodes: NodeSet) -> set[MemoryKind]:
    return {topology.node(n).kind for n in nodes}


def expand(topology: Topology, zone: NodeSet, kinds: Collection[MemoryKind]) -> NodeSet:
    """The nodes libmem adds to `zone` for `kinds`: for each kind, from every node of the
    zone the nearest nodes of that kind outside it, as long as they are no farther than
    the nearest found so far from an earlier node (libmem's newCloseNodesOfType)."""
    others = [n for n in sorted(topology.nodes) if n not in zone]
    out: set[int] = set()
    for kind in kinds:
        near = float("inf")
        for node in zone.sorted():
            dists = sorted({topology.distance(node, n) for n in topology.nodes})
            for d in dists[1:]:  # the nearest distance is the node's own
                found = {
                    n
                    for n in others
                    if topology.distance(node, n) == d and topology.node(n).kind == kind
                }
                if not found:
                    continue
                if d <= near:
                    near = d
                    out |= found
                break
    return IDSet(out)


def realloc(
    topology: Topology, mz: MemZone, nodes: NodeSet, kinds: Collection[MemoryKind]
) -> MemZone:
    """`mz` after its balloon's CPUs moved onto `nodes`, the container wanting `kinds`
    (empty: no preference): libmem's Realloc as the balloons plugin calls it."""
    if not nodes or nodes == mz.affinity:
        return _given(mz, mz.zone)
    if nodes <= mz.zone and set(kinds) <= _kinds(topology, mz.zone):
        return _given(mz, mz.zone)
    if kinds:
        asked = IDSet(n for n in nodes if topology.node(n).kind in kinds)
    else:
        asked, kinds = nodes, _kinds(topology, nodes)
    new = expand(topology, mz.zone | asked, kinds)
    if not new:
        # libmem fails ("can't find new nodes"): the balloon's nodes, the zone kept
        return _given(mz, nodes)
    zone = mz.zone | asked | new
    return MemZone(affinity=mz.affinity, zone=zone, given=zone)


def _given(mz: MemZone, given: NodeSet) -> MemZone:
    """`mz` having been given `given`."""
    return mz if mz.given == given else MemZone(affinity=mz.affinity, zone=mz.zone, given=given)
