"""Burstable CPU limits and ``unlimitedBurstable`` in the topology-aware policy.

nri-plugins ranks the pools for a Burstable container by its CPU limit: with a limit,
the lowest (deepest) pool with room for the limit wins; without one, a pool at the
``unlimitedBurstable`` level (default ``package``; the ``unlimited-burstable``
annotation overrides it per pod or container) wins, the roomiest first; a level the
machine has no pools at is the next level out.  The scenarios mirror
n4c16/test14-burstable on nri-plugins' n4c16 shape (`small()`, 750m reserved).
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nri_resmgr.model import AllocationError, AnnotationError, ContainerInfo, QoSClass
from nri_resmgr.policy.topology_aware import TopologyAwarePolicy
from nri_resmgr.policy.topology_aware.offers import allocatable_shared
from nri_resmgr.policy.topology_aware.preferences import UNLIMITED_BURSTABLE
from nri_resmgr.topology.synthetic import build_topology
from tests.support.builders import ctr, small, with_current
from tests.support.topology_aware import Node

BU = QoSClass.BURSTABLE


def burstable(
    name: str,
    milli: int,
    limit: int | None = None,
    pod: str | None = None,
    level: dict[str, str] | None = None,
) -> ContainerInfo:
    """A Burstable container; `level` maps ``pod`` / ``container.NAME`` to an
    ``unlimited-burstable`` annotation value.  Its memory is their e2e framework's
    default (request 100M, limit 200M), which every pool holds: without a memory limit
    the pool with the most memory would win first (`test_parity_rules.py`)."""
    annotations = {f"{UNLIMITED_BURSTABLE}/{k}": v for k, v in (level or {}).items()}
    c = ctr(name, pod=pod or name, qos=BU, milli=milli, limit=limit, ann=annotations, cid=name)
    memory = dataclasses.replace(c.request, memory_request=100 << 20, memory_limit=200 << 20)
    return dataclasses.replace(c, request=memory)


def test_request_1_limit_12_gets_room_for_12() -> None:
    """Issue 14: request 1 / limit 12 got a 4-CPU cpuset; the root has room for 12."""
    n = Node()
    n.create(burstable("b", 1000, 12000))
    assert (n.a("b").pool, len(n.cpus("b"))) == ("root", 15)


def test_limited_burstable_goes_to_the_lowest_pool_with_room() -> None:
    """n4c16/test14-burstable (pod4): limit 5 CPUs, two containers: a package each."""
    n = Node()
    n.create(
        burstable("pod4c0", 2000, 5000, pod="pod4"), burstable("pod4c1", 2000, 5000, pod="pod4")
    )
    assert n.nodes("pod4c0") == {2, 3}
    assert n.nodes("pod4c1") == {0, 1}
    # a limit a NUMA node has room for: a NUMA node
    n.create(burstable("small", 500, 2000))
    assert len(n.nodes("small")) == 1


def test_unlimited_burstable_prefers_a_package_by_default() -> None:
    """n4c16/test14-burstable (pod5): no limit: a package each."""
    n = Node()
    n.create(burstable("pod5c0", 2000, pod="pod5"), burstable("pod5c1", 2000, pod="pod5"))
    assert n.nodes("pod5c0") in ({0, 1}, {2, 3})
    assert n.nodes("pod5c1") in ({0, 1}, {2, 3})


def test_unlimited_burstable_annotations() -> None:
    """n4c16/test14-burstable (pod6, pod7): numa, system, and die (none here: package)."""
    n = Node()
    n.create(
        burstable("pod6c0", 2000, pod="pod6", level={"container.pod6c0": "numa"}),
        burstable("pod6c1", 2000, pod="pod6", level={"container.pod6c1": "system"}),
    )
    assert (len(n.nodes("pod6c0")), len(n.nodes("pod6c1"))) == (1, 4)
    n.create(
        burstable("pod7c0", 2000, pod="pod7", level={"container.pod7c0": "numa"}),
        burstable("pod7c1", 2000, pod="pod7", level={"container.pod7c1": "die"}),
    )
    assert (len(n.nodes("pod7c0")), len(n.nodes("pod7c1"))) == (1, 2)
    n.rebuilt_moves_nobody()


def test_unlimited_burstable_config_and_pod_annotation() -> None:
    """n4c16/test14-burstable (pod8): unlimitedBurstable numa, one container annotated die;
    and a pod-wide annotation applies to every container without its own."""
    n = Node({"unlimitedBurstable": "numa"})
    n.create(
        burstable("pod8c0", 2000, pod="pod8"),
        burstable("pod8c1", 2000, pod="pod8", level={"container.pod8c1": "die"}),
    )
    assert (len(n.nodes("pod8c0")), len(n.nodes("pod8c1"))) == (1, 2)
    n.create(burstable("p9", 100, pod="pod9", level={"pod": "system"}))
    assert len(n.nodes("p9")) == 4


def test_single_package_machine_package_level_is_the_root() -> None:
    t = build_topology({"packages": 1, "nodes": 2, "cores": 2, "threads": 2, "memory": "2G"})
    n = Node(topology=t)
    n.create(burstable("b", 100))
    assert n.a("b").pool == "root"


def test_errors() -> None:
    p = TopologyAwarePolicy(topology=small(), config={})
    with pytest.raises(AnnotationError) as exc:
        p.allocate(p.initial_state(), burstable("b", 100, level={"pod": "socket"}))
    assert str(exc.value) == (
        "pod default/b container b: annotation unlimited-burstable.resource-policy.nri.io "
        'has value "socket"; expected one of system, package, die, numa, l3cache'
    )
    from nri_resmgr.model import ConfigError

    with pytest.raises(ConfigError, match="unlimitedBurstable"):
        TopologyAwarePolicy(topology=small(), config={"unlimitedBurstable": "socket"})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    others=st.lists(
        st.tuples(st.sampled_from([0, 100, 1000, 2000, 3000]), st.booleans()), max_size=8
    ),
    milli=st.sampled_from([0, 100, 500, 1000]),
    limit=st.integers(1, 16).map(lambda n: n * 1000),
)
def test_a_limited_burstable_goes_to_the_deepest_pool_with_room(
    others: list[tuple[int, bool]], milli: int, limit: int
) -> None:
    """Whatever runs already: if some pool has room for the limit, the chosen pool has,
    and no deeper pool that fits the request does."""
    p = TopologyAwarePolicy(topology=small(), config={})
    s = p.initial_state()
    for i, (m, exclusive) in enumerate(others):
        qos = QoSClass.GUARANTEED if exclusive else BU
        try:
            s = p.allocate(s, ctr(f"o{i}", pod=f"o{i}", qos=qos, milli=m, limit=m)).state
        except AllocationError:
            continue
    try:
        d = p.allocate(s, burstable("b", milli, limit))
    except AllocationError:
        return
    p.check(d.state)
    assert d.assignment is not None
    chosen = p.tree.by_name(d.assignment.pool)
    room = {q.index: allocatable_shared(p.tree, s.supply, q) for q in p.tree.pools}
    fits = {q.index for q in p.tree.pools if s.supply.shared[q.index] and room[q.index] >= milli}
    with_room = {i for i in fits if room[i] >= limit}
    if with_room:
        assert chosen.index in with_room
        assert not any(p.tree.pools[i].depth > chosen.depth for i in with_room)
    rendered = p.render(d.state)
    cs = [ctr(f"o{i}", pod=f"o{i}", qos=QoSClass.GUARANTEED if e else BU, milli=m, limit=m)
          for i, (m, e) in enumerate(others)]  # fmt: skip
    live = [c for c in cs if c.id in d.state.grants] + [burstable("b", milli, limit)]
    again = p.rebuild([with_current(c, rendered[c.id].cpus, rendered[c.id].mems) for c in live])
    assert again.updates == (), again.reason


def test_available_resources_and_unlimited_burstable_system() -> None:
    """n4c16/test04-available-resources, in our numbering (their node1 = 4-7 and node2 =
    8-11 are our 2-3,10-11 and 4-5,12-13).

    With availableResources cpuset:2-5,10-13 and reservedResources cpuset:13, a 3-CPU
    container fills node1's exclusive side and two 980m ones share node2's CPUs; with
    two CPUs of node0 excluded, node3 and one CPU of node2 reserved and
    unlimitedBurstable system, an unlimited Burstable container runs on every other CPU.
    """
    n = Node(
        {
            "availableResources": {"cpu": "cpuset:2-5,10-13"},
            "reservedResources": {"cpu": "cpuset:13"},
        }
    )
    n.create(ctr("pod0c0", pod="pod0", milli=3000, cid="pod0c0"))
    assert (len(n.cpus("pod0c0")), n.nodes("pod0c0"), str(n.a("pod0c0").mems)) == (3, {1}, "1")
    n.create(*(ctr(f"pod1c{i}", pod="pod1", milli=980, cid=f"pod1c{i}") for i in range(2)))
    assert {str(n.cpus(f"pod1c{i}")) for i in range(2)} == {"4-5,12"}
    assert {str(n.a(f"pod1c{i}").mems) for i in range(2)} == {"2"}

    n = Node(
        {
            "availableResources": {"cpu": "exclude-cpuset:0,8"},
            "reservedResources": {"cpu": "cpuset:5,6-7,14-15"},
            "unlimitedBurstable": "system",
        }
    )
    n.create(burstable("pod2c0", 250))
    assert str(n.cpus("pod2c0")) == "1-4,9-13"
    assert str(n.a("pod2c0").mems) == "0-3"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    others=st.lists(
        st.tuples(st.sampled_from([0, 100, 1000, 2000, 3000]), st.booleans()), max_size=8
    ),
    milli=st.sampled_from([0, 100, 500, 1000, 3000]),
    level=st.sampled_from(["system", "package", "die", "numa", "l3cache"]),
)
def test_an_unlimited_burstable_goes_to_its_level_when_a_pool_there_fits(
    others: list[tuple[int, bool]], milli: int, level: str
) -> None:
    """If a pool at the (existing) preferred level can take the request, one does, and it
    is the roomiest of those that can."""
    p = TopologyAwarePolicy(topology=small(), config={"unlimitedBurstable": level})
    s = p.initial_state()
    for i, (m, exclusive) in enumerate(others):
        qos = QoSClass.GUARANTEED if exclusive else BU
        try:
            s = p.allocate(s, ctr(f"o{i}", pod=f"o{i}", qos=qos, milli=m, limit=m)).state
        except AllocationError:
            continue
    try:
        d = p.allocate(s, burstable("b", milli))
    except AllocationError:
        return
    p.check(d.state)
    assert d.assignment is not None
    chosen = p.tree.by_name(d.assignment.pool)
    target = p.tree.existing_level(level)
    room = {q.index: allocatable_shared(p.tree, s.supply, q) for q in p.tree.pools}
    at_level = [
        q for q in p.tree.pools
        if q.level == target and s.supply.shared[q.index] and room[q.index] >= milli
    ]  # fmt: skip
    if at_level:
        assert chosen.level == target
        assert room[chosen.index] == max(room[q.index] for q in at_level)
