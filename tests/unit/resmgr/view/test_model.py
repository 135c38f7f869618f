"""The node picture (`nri_resmgr.view.model`): what holds each CPU, for every policy."""

from __future__ import annotations

from typing import Any

import pytest

from nri_resmgr.model import Assignment, ContainerID, CPUKind
from nri_resmgr.simulator.run import quiet_log
from nri_resmgr.simulator.scenario import load_scenario
from nri_resmgr.simulator.views import run_views
from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.load import load_topology
from nri_resmgr.view.model import (
    Holder,
    NodeView,
    ViewError,
    build_view,
    view_from_dict,
)
from nri_resmgr.view.pools import PoolCPUs
from tests.unit.resmgr.view.support import container_info

GUARANTEED_2 = {
    "requests": {"cpu": "2", "memory": "100M"},
    "limits": {"cpu": "2", "memory": "100M"},
}

GUARANTEED_1 = {
    "requests": {"cpu": "1", "memory": "100M"},
    "limits": {"cpu": "1", "memory": "100M"},
}


def views(doc: dict[str, Any]) -> list[NodeView]:
    _, out = run_views(load_scenario(doc), log=quiet_log())
    return out


def held_by(view: NodeView, owner: str) -> IDSet:
    return IDSet(c.id for c in view.cpus.values() if c.owner == owner)


def check_partition(view: NodeView) -> None:
    """Every exclusive container holds exactly its cpuset; nothing else holds its CPUs."""
    for row in view.containers:
        if row.kind in ("exclusive", "isolated"):
            assert held_by(view, row.id) == IDSet.parse(row.cpus), row.key
            assert {view.cpus[c].holder for c in IDSet.parse(row.cpus)} == {Holder(row.kind)}


def test_topology_aware_marks_reserved_exclusive_shared_and_offline() -> None:
    view = views(
        {
            "topology": "packages=1,nodes=2,cores=2,threads=2,offline=7",
            "policy": "topology-aware",
            "config": {"reservedResources": {"cpu": "cpuset:0"}},
            "steps": [
                {"create": {"pod": "db", "containers": [{"name": "pg", **GUARANTEED_2}]}},
                {
                    "create": {
                        "pod": "web",
                        "containers": [{"name": "nginx", "requests": {"cpu": "100m"}}],
                    }
                },
            ],
        }
    )[-1]
    check_partition(view)
    pg = next(r for r in view.containers if r.name == "pg")
    assert pg.kind == "exclusive" and len(IDSet.parse(pg.cpus)) == 2
    # reserved with no container on it: the policy's reserved CPU, not idle
    assert view.cpus_of(Holder.RESERVED) == IDSet({0})
    assert view.cpus_of(Holder.OFFLINE) == IDSet({7})
    nginx = next(r for r in view.containers if r.name == "nginx")
    assert IDSet.parse(nginx.cpus) <= view.cpus_of(Holder.SHARED)
    # every online CPU is held by one of these (no idle CPU in topology-aware)
    online = IDSet(c for c in view.cpus if c != 7)
    assert (
        view.cpus_of(Holder.RESERVED) | view.cpus_of(Holder.SHARED) | view.cpus_of(Holder.EXCLUSIVE)
    ) == online
    assert view.conflicts == ""


def test_topology_aware_isolated_container_holds_isolated_cpus() -> None:
    view = views(
        {
            "topology": "packages=1,cores=4,threads=1,isolated=2-3",
            "policy": "topology-aware",
            "config": {"reservedResources": {"cpu": "cpuset:0"}},
            "steps": [{"create": {"pod": "rt", "containers": [{"name": "loop", **GUARANTEED_1}]}}],
        }
    )[-1]
    loop = view.containers[0]
    assert loop.kind == "isolated"
    assert held_by(view, loop.id) == IDSet.parse(loop.cpus)
    assert IDSet.parse(loop.cpus) <= IDSet({2, 3})
    assert all(view.cpus[c].isolcpu for c in (2, 3)) and not view.cpus[1].isolcpu
    check_partition(view)


def test_static_reserved_and_exclusive() -> None:
    view = views(
        {
            "topology": "two-socket",
            "policy": "static",
            "config": {"reservedSystemCPUs": "0,8"},
            "steps": [
                {
                    "create": {
                        "pod": "web",
                        "containers": [{"name": "nginx", "requests": {"cpu": "500m"}}],
                    }
                },
                {"create": {"pod": "db", "containers": [{"name": "pg", **GUARANTEED_2}]}},
            ],
        }
    )[-1]
    check_partition(view)
    assert view.cpus_of(Holder.RESERVED) == IDSet({0, 8})
    pg = next(r for r in view.containers if r.name == "pg")
    assert view.cpus_of(Holder.SHARED) == IDSet(range(16)) - IDSet({0, 8}) - IDSet.parse(pg.cpus)


def test_balloons_each_cpu_in_its_balloon() -> None:
    view = views(
        {
            "topology": "packages=1,cores=4,threads=2",
            "policy": "balloons",
            "config": {
                "reservedResources": {"cpu": "1"},
                "balloonTypes": [{"name": "db", "namespaces": ["db"], "minCPUs": 2}],
            },
            "steps": [
                {
                    "create": {
                        "pod": "pg",
                        "namespace": "db",
                        "containers": [{"name": "main", **GUARANTEED_2}],
                    }
                }
            ],
        }
    )[-1]
    assert view.balloons, "a balloons picture lists its balloons"
    for b in view.balloons:
        assert held_by(view, b.name) == IDSet.parse(b.cpus), b.name
        assert {view.cpus[c].holder for c in IDSet.parse(b.cpus)} <= {Holder.BALLOON}
    db = next(b for b in view.balloons if b.type == "db")
    main = view.containers[0]
    assert db.containers == (main.id,)
    assert IDSet.parse(db.cpus) <= IDSet.parse(main.cpus)


def test_none_policy_holds_nothing() -> None:
    view = views(
        {
            "topology": "packages=1,cores=2,threads=2",
            "policy": "none",
            "steps": [{"create": {"pod": "a", "containers": [{"name": "c", **GUARANTEED_2}]}}],
        }
    )[-1]
    assert view.cpus_of(Holder.IDLE) == IDSet(range(4))
    assert [(r.key, r.kind, r.cpus) for r in view.containers] == [("default/a/c", "none", "")]


TOPO = load_topology("packages=1,nodes=2,cores=2,threads=2")


def a(cid: str, cpus: str, kind: CPUKind, mems: str = "", pool: str = "p") -> Assignment:
    return Assignment(ContainerID(cid), IDSet.parse(cpus), IDSet.parse(mems), kind, pool)


def test_mixed_container_holds_its_cpus_outside_the_shared_set() -> None:
    containers = [(container_info("m"), a("m", "1-3", CPUKind.MIXED))]
    view = build_view(
        TOPO,
        policy="p",
        containers=containers,
        pools=PoolCPUs(reserved=IDSet({0}), shared={"p": IDSet({3, 4})}),
    )
    assert held_by(view, "m") == IDSet({1, 2})
    assert view.cpus[3].holder is Holder.SHARED and view.cpus[3].owner == "p"
    assert view.cpus[5].holder is Holder.IDLE


def test_a_cpu_held_exclusively_twice_is_a_conflict() -> None:
    containers = [
        (container_info("x"), a("x", "1-2", CPUKind.EXCLUSIVE)),
        (container_info("y"), a("y", "2-3", CPUKind.EXCLUSIVE)),
    ]
    view = build_view(TOPO, policy="p", containers=containers, pools=PoolCPUs())
    assert view.conflicts == "2"
    assert held_by(view, "x") == IDSet({1, 2}) and held_by(view, "y") == IDSet({3})


def test_memory_lists_pinned_containers_per_node() -> None:
    containers = [
        (container_info("x"), a("x", "0", CPUKind.SHARED, mems="1")),
        (container_info("y"), a("y", "0", CPUKind.SHARED, mems="0-1")),  # every node: not pinned
        (container_info("z"), None),
    ]
    view = build_view(TOPO, policy="p", containers=containers, pools=PoolCPUs())
    assert [(m.node, m.pinned) for m in view.memory] == [(0, ()), (1, ("x",))]
    assert [r.kind for r in view.containers] == ["shared", "shared", ""]


def test_json_round_trip() -> None:
    view = views(
        {
            "topology": "two-socket",
            "policy": "balloons",
            "config": {"reservedResources": {"cpu": "1"}},
            "steps": [{"create": {"pod": "a", "containers": [{"name": "c", **GUARANTEED_2}]}}],
        }
    )[-1]
    again = view_from_dict(view.as_dict())
    assert again == view
    assert again.by_id.keys() == view.by_id.keys()


@pytest.mark.parametrize(
    "doc",
    [{}, {"title": "t", "policy": "p", "machine": "m", "packages": [], "cpus": [[0, "eaten"]]}],
    ids=["empty", "bad-cpu"],
)
def test_not_a_view_is_a_view_error(doc: dict[str, Any]) -> None:
    with pytest.raises(ViewError, match=r"expected the JSON of NodeView\.as_dict"):
        view_from_dict(doc)
