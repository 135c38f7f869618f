"""The topology-aware renderings a decision keeps (`rendering.RenderMemo`): a kept
rendering is used again only for the same grant on the same shared set."""

from __future__ import annotations

from dataclasses import replace

from nri_resmgr.model import Assignment, ContainerID, QoSClass
from nri_resmgr.policy.topology_aware import TopologyAwarePolicy, TopologyAwareState
from nri_resmgr.policy.topology_aware.rendering import RenderMemo, render
from nri_resmgr.topology.cpuset import IDSet
from tests.support.builders import ctr, small


def test_a_kept_rendering_is_used_only_for_the_same_grant_and_shared_set() -> None:
    """`RenderMemo` renders again for another grant (here: CPUs not pinned) on the same
    shared set, and for another shared set of the same grant."""
    p = TopologyAwarePolicy(topology=small(), config={})
    s = p.initial_state()
    for name in ("a", "b"):
        s = p.allocate(s, ctr(name, qos=QoSClass.BURSTABLE, milli=500, cid=name)).state
    a, memo = ContainerID("a"), RenderMemo()

    def rendered(state: TopologyAwareState) -> Assignment:
        return memo.render(tree=state.tree, topology=p.topology, state=state, cid=a)

    first = rendered(s)
    assert first == render(tree=s.tree, topology=p.topology, supply=s.supply, grant=s.grants[a])
    assert rendered(s) is first, "the same grant and shared set: the rendering kept"
    g = s.grants[a]
    unpinned = replace(
        s, grants=s.grants.set(a, replace(g, request=replace(g.request, pin_cpu=False)))
    )
    assert rendered(unpinned) != first and rendered(unpinned).cpus == IDSet()
    s2 = p.allocate(s, ctr("x", qos=QoSClass.GUARANTEED, milli=1000, cid="x")).state
    if s2.supply.shared[g.pool] is not s.supply.shared[g.pool]:
        assert rendered(s2).cpus == s2.supply.shared[g.pool]
