"""`RenderMemo.render_many`: shared containers that ask alike share one rendering of
their pool's shared set; each request field a shared rendering is made of
(`rendering._shape`) tells two containers apart, and every result is `render`'s own."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from nri_resmgr.model import ContainerID, MemoryKind, QoSClass
from nri_resmgr.policy.topology_aware import TopologyAwarePolicy, TopologyAwareState
from nri_resmgr.policy.topology_aware.rendering import RenderMemo, render
from tests.support.builders import ctr, topo

X, Y, G = ContainerID("x"), ContainerID("y"), ContainerID("g")

#: x's request changed in one field of the shape; y keeps the default
ASKED: dict[str, dict[str, Any]] = {
    "hide-hyperthreads": {"hide_hyperthreads": True},
    "pin-cpu": {"pin_cpu": False},
    "pin-memory": {"pin_memory": False},
    "memory-kinds": {"memory_kinds": frozenset({MemoryKind.HBM})},
}


def _state() -> tuple[TopologyAwarePolicy, TopologyAwareState]:
    """Two Burstable containers in the one pool of a machine with hyperthreads and an
    HBM node, and an exclusive one that shrinks their shared set."""
    machine = topo(
        packages=1,
        cores=4,
        threads=2,
        nodes=1,
        memory="2G",
        extra_memory_nodes=[{"kind": "hbm", "memory": "1G", "attach": 0, "distances": {0: 15}}],
    )
    p = TopologyAwarePolicy(topology=machine, config={})
    s = p.initial_state()
    for cid in (X, Y):
        s = p.allocate(s, ctr("c", pod=cid, qos=QoSClass.BURSTABLE, milli=200, cid=cid)).state
    s = p.allocate(s, ctr("g", qos=QoSClass.GUARANTEED, milli=1000, cid=G)).state
    return p, s


def _rendered(p: TopologyAwarePolicy, s: TopologyAwareState) -> dict[ContainerID, Any]:
    return {
        cid: render(tree=s.tree, topology=p.topology, supply=s.supply, grant=s.grants[cid])
        for cid in (X, Y, G)
    }


def test_alike_shared_containers_share_one_rendering() -> None:
    p, s = _state()
    got = RenderMemo().render_many(tree=s.tree, topology=p.topology, state=s, cids=[X, Y, G])
    assert got == _rendered(p, s) and list(got) == [X, Y, G]
    assert got[X].cpus is got[Y].cpus and got[Y].container_id == Y


@pytest.mark.parametrize("field", list(ASKED), ids=list(ASKED))
def test_a_shared_container_asking_otherwise_renders_its_own(field: str) -> None:
    p, s = _state()
    g = s.grants[X]
    s = replace(s, grants=s.grants.set(X, replace(g, request=replace(g.request, **ASKED[field]))))
    want = _rendered(p, s)
    assert (want[X].cpus, want[X].mems) != (want[Y].cpus, want[Y].mems), "the field matters"
    for order in ([X, Y, G], [Y, X, G]):
        got = RenderMemo().render_many(tree=s.tree, topology=p.topology, state=s, cids=order)
        assert got == want and list(got) == order
