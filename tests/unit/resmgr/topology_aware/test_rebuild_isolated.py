"""A rebuild keeps a mixed container off the isolated CPUs it never had.

Found by `test_prefs_props.test_sequences_with_priorities_isolation_and_affinities`
(hybrid-isolated, colocate, a saved hypothesis example; issue 24): a Guaranteed 1500m
container prefers isolated CPUs for its whole CPU (the default), but when it came every
isolated CPU was held by a ``require-isolated-cpus`` container, so its whole CPU was
sliced off the shared set.  Once that container is gone, a rebuild from exactly what
was rendered placed the mixed container as new and took the free isolated CPU: a move
without cause.
"""

from __future__ import annotations

from nri_resmgr.model import CPUKind
from nri_resmgr.policy.topology_aware.preferences import REQUIRE_ISOLATED
from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.synthetic import build_topology
from tests.support.builders import ctr
from tests.support.topology_aware import Node, guaranteed

#: 1 package, 2 nodes of 4 two-thread cores, E-cores, isolated CPUs 1 and 9 (node 0)
HYBRID_ISOLATED = {
    "packages": 1,
    "nodes": 2,
    "cores": 4,
    "threads": 2,
    "memory": "2G",
    "efficient_cpus": "2-3,6-7,10-11,14-15",
    "isolated": "1,9",
}


def _mixed_sliced_while_isolated_taken() -> Node:
    """The live sequence: node 1 filled, the isolated CPUs taken, a mixed container
    sliced off node 0's shared set, then the isolated container gone."""
    n = Node({"colocatePods": True, "colocateNamespaces": True}, build_topology(HYBRID_ISOLATED))
    n.create(guaranteed("a", 3000), guaranteed("b", 3000), guaranteed("c", 2000))
    n.create(ctr("iso", pod="iso", milli=2000, cid="iso", ann={REQUIRE_ISOLATED: "true"}))
    assert n.cpus("iso") == IDSet.parse("1,9")
    n.create(guaranteed("m", 1500))
    assert n.a("m").kind is CPUKind.MIXED
    assert n.cpus("m") == IDSet.parse("2-3,8,10-11")
    n.delete("iso")
    return n


def test_a_mixed_container_sliced_off_the_shared_set_stays_there_at_rebuild() -> None:
    n = _mixed_sliced_while_isolated_taken()
    n.rebuilt_moves_nobody()


def test_a_new_mixed_container_still_takes_the_freed_isolated_cpu() -> None:
    """The rebuild's reading does not change live placement: a container that comes now
    prefers the isolated CPUs that are free again."""
    n = _mixed_sliced_while_isolated_taken()
    n.create(guaranteed("new", 1500))
    assert n.cpus("new") & IDSet.parse("1,9")


def test_a_mixed_container_on_an_isolated_cpu_stays_there_at_rebuild() -> None:
    """Only a report with no isolated CPU reads as sliced off the shared set: one that
    holds its isolated CPU keeps it."""
    n = Node({}, build_topology(HYBRID_ISOLATED))
    n.create(guaranteed("m", 1500))
    assert n.a("m").kind is CPUKind.MIXED
    assert n.cpus("m") & IDSet.parse("1,9")
    n.rebuilt_moves_nobody()
