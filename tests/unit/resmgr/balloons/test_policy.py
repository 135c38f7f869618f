"""The balloons policy: type matching, filling, inflating, deflating, rebuild."""

from __future__ import annotations

from typing import Any

import pytest

from nri_resmgr.model import (
    AllocationError,
    AnnotationError,
    ConfigError,
    ContainerID,
    CPUKind,
    QoSClass,
)
from nri_resmgr.policy.balloons import BALLOON_ANNOTATION
from nri_resmgr.policy.balloons.matching import evaluate, expand, key_value
from nri_resmgr.policy.balloons.spec import Expression
from nri_resmgr.policy.expressions import Operator
from nri_resmgr.policy.sched_classes import SCHEDULING_CLASS_ANNOTATION
from nri_resmgr.topology.cpuset import IDSet
from tests.support.balloons import bctr, policy, run

FULL: dict[str, Any] = {
    "reservedResources": {"cpu": "1"},
    "balloonTypes": [{"name": "full", "minCPUs": 1, "maxCPUs": 4, "namespaces": ["full-*"]}],
}


def _names(p: Any, st: Any) -> dict[str, str]:
    return {str(cid): m.balloon for cid, m in st.members.items()}


def test_types_by_annotation_namespace_and_fallbacks() -> None:
    p = policy(FULL)
    st = run(
        p,
        bctr("a", pod="p1", ns="full-1", milli=500),
        bctr("k", pod="k", ns="kube-system", milli=100),
        bctr("d", pod="p2", ns="other"),
        bctr("x", pod="p3", ns="other", ann={BALLOON_ANNOTATION + "/pod": "full"}),
    )
    assert _names(p, st) == {
        "p1-a": "full[0]",
        "k-k": "reserved[0]",
        "p2-d": "default[0]",
        "p3-x": "full[0]",
    }


def test_unknown_balloon_annotation_is_an_error() -> None:
    p = policy(FULL)
    with pytest.raises(AnnotationError, match='names balloon type "nope"; expected one of'):
        p.allocate(p.initial_state(), bctr("a", ann={BALLOON_ANNOTATION: "nope"}))


def test_inflates_with_requests_and_updates_the_others() -> None:
    p = policy(FULL)
    st = run(p, bctr("a", pod="p1", ns="full-1", milli=1500))
    assert len(st.balloons["full[0]"].cpus) == 2
    d = p.allocate(st, bctr("b", pod="p2", ns="full-1", milli=1000))
    assert d.assignment is not None and len(d.assignment.cpus) == 3
    assert [u.container_id for u in d.updates] == ["p1-a"]
    assert d.updates[0].cpus == d.assignment.cpus
    # deflates when one leaves, and the one left is told
    r = p.release(d.state, ContainerID("p2-b"))
    assert len(r.state.balloons["full[0]"].cpus) == 2
    assert [u.container_id for u in r.updates] == ["p1-a"]
    p.check(r.state)


def test_max_cpus_makes_a_new_balloon() -> None:
    p = policy(FULL)
    st = run(
        p,
        bctr("a", pod="p1", ns="full-1", milli=3000),
        bctr("b", pod="p2", ns="full-1", milli=2000),
    )
    assert _names(p, st) == {"p1-a": "full[0]", "p2-b": "full[1]"}
    assert st.balloons["full[0]"].cpus.isdisjoint(st.balloons["full[1]"].cpus)


def test_max_balloons_and_cpus_exhausted_fail_with_reasons() -> None:
    cfg = {"balloonTypes": [{"name": "one", "maxCPUs": 2, "maxBalloons": 1, "namespaces": ["*"]}]}
    p = policy(cfg)
    st = run(p, bctr("a", pod="p1", milli=2000))
    with pytest.raises(AllocationError, match="maxBalloons 1 reached") as exc:
        p.allocate(st, bctr("b", pod="p2", milli=1000))
    assert "pod default/p2 container b" in str(exc.value)


def test_min_balloons_exist_from_the_start_and_stay() -> None:
    cfg = {"balloonTypes": [{"name": "b", "minBalloons": 2, "minCPUs": 2, "namespaces": ["*"]}]}
    p = policy(cfg)
    st = p.initial_state()
    assert {n: len(b.cpus) for n, b in st.balloons.items()} == {
        "reserved[0]": 1,
        "b[0]": 2,
        "b[1]": 2,
        "default[0]": 0,
    }
    st = run(p, bctr("a", milli=100))
    st = p.release(st, ContainerID("p-a")).state
    assert set(st.balloons) == {"reserved[0]", "b[0]", "b[1]", "default[0]"}


def test_empty_optional_balloon_goes_away() -> None:
    p = policy(FULL)
    st = run(p, bctr("a", pod="p1", ns="full-1", milli=1000))
    st = p.release(st, ContainerID("p1-a")).state
    assert "full[0]" not in st.balloons
    assert st.used == IDSet([0])


def test_prefer_new_balloons_and_same_pod() -> None:
    cfg = {"balloonTypes": [{"name": "n", "preferNewBalloons": True, "namespaces": ["*"]}]}
    p = policy(cfg)
    st = run(
        p,
        bctr("a", pod="p1", milli=1000),
        bctr("b", pod="p1", milli=1000),
        bctr("c", pod="p2", milli=1000),
    )
    # same pod first (before new), then a new balloon per pod
    assert _names(p, st) == {"p1-a": "n[0]", "p1-b": "n[0]", "p2-c": "n[1]"}


def test_prefer_spreading_pods_skips_same_pod() -> None:
    cfg = {
        "balloonTypes": [
            {
                "name": "s",
                "preferSpreadingPods": True,
                "preferNewBalloons": True,
                "namespaces": ["*"],
            }
        ]
    }
    p = policy(cfg)
    st = run(p, bctr("a", pod="p1", milli=1000), bctr("b", pod="p1", milli=1000))
    assert _names(p, st) == {"p1-a": "s[0]", "p1-b": "s[1]"}


def test_prefer_per_namespace_balloon() -> None:
    cfg = {"balloonTypes": [{"name": "ns", "preferPerNamespaceBalloon": True, "namespaces": ["*"]}]}
    p = policy(cfg)
    st = run(
        p,
        bctr("a", pod="p1", ns="x", milli=100),
        bctr("b", pod="p2", ns="y", milli=100),
        bctr("c", pod="p3", ns="x", milli=100),
    )
    assert _names(p, st) == {"p1-a": "ns[0]", "p2-b": "ns[1]", "p3-c": "ns[0]"}


def test_group_by_keeps_groups_apart() -> None:
    cfg = {"balloonTypes": [{"name": "g", "groupBy": "${pod/labels/app}", "namespaces": ["*"]}]}
    p = policy(cfg)
    st = run(
        p,
        bctr("a", pod="p1", milli=100, labels={"app": "x"}),
        bctr("b", pod="p2", milli=100, labels={"app": "y"}),
        bctr("c", pod="p3", milli=100, labels={"app": "x"}),
    )
    assert _names(p, st) == {"p1-a": "g[0]", "p2-b": "g[1]", "p3-c": "g[0]"}


def test_share_idle_cpus_in_same_numa() -> None:
    cfg = {
        "reservedResources": {"cpu": "cpuset:31"},
        "balloonTypes": [
            {"name": "s", "shareIdleCPUsInSame": "numa", "minCPUs": 2, "namespaces": ["*"]}
        ],
    }
    p = policy(cfg)
    d = p.allocate(p.initial_state(), bctr("a", milli=100))
    st = d.state
    own = st.balloons["s[0]"].cpus
    assert d.assignment is not None
    (node,) = p.topology.nodes_of(own)
    assert d.assignment.cpus == p.topology.node_cpus(node) - IDSet([31])
    assert len(own) == 2


def test_hide_hyperthreads_keeps_one_thread_per_core() -> None:
    cfg = {
        "balloonTypes": [{"name": "h", "hideHyperthreads": True, "minCPUs": 4, "namespaces": ["*"]}]
    }
    p = policy(cfg)
    d = p.allocate(p.initial_state(), bctr("a", milli=100))
    assert d.assignment is not None
    assert len(d.state.balloons["h[0]"].cpus) == 4 and len(d.assignment.cpus) == 2


def test_best_effort_container_gets_a_cpu_of_its_own() -> None:
    # minCPUs 0: the balloon still takes one CPU for its best-effort container (not
    # the reserved ones), and gives it back when the container goes
    p = policy(FULL)
    d = p.allocate(p.initial_state(), bctr("a", qos=QoSClass.BEST_EFFORT))
    p.check(d.state)
    assert len(d.state.balloons["default[0]"].cpus) == 1
    assert d.assignment is not None and d.assignment.cpus == d.state.balloons["default[0]"].cpus
    assert not d.assignment.cpus & IDSet([0])
    r = p.release(d.state, ContainerID("p-a"))
    assert r.state.balloons["default[0]"].cpus == IDSet()


def test_prefer_new_balloons_gives_each_best_effort_container_a_cpu() -> None:
    # their test01 pod6: a new one-CPU balloon per best-effort container
    cfg = {
        "reservedResources": {"cpu": "1"},
        "balloonTypes": [
            {"name": "n", "preferNewBalloons": True, "preferSpreadingPods": True,
             "namespaces": ["*"]},
        ],
    }  # fmt: skip
    p = policy(cfg)
    st = run(p, *(bctr(f"c{i}", pod="p1") for i in range(3)))
    cpus = [st.balloons[f"n[{i}]"].cpus for i in range(3)]
    assert [len(c) for c in cpus] == [1, 1, 1]
    assert len(cpus[0] | cpus[1] | cpus[2]) == 3


def test_new_step_takes_an_empty_balloon_before_making_one() -> None:
    cfg = {
        "balloonTypes": [
            {"name": "n", "preferNewBalloons": True, "minBalloons": 2, "minCPUs": 1,
             "namespaces": ["*"]},
        ],
    }  # fmt: skip
    p = policy(cfg)
    st = run(
        p,
        bctr("a", pod="p1", milli=100),
        bctr("b", pod="p2", milli=100),
        bctr("c", pod="p3", milli=100),
    )
    assert _names(p, st) == {"p1-a": "n[0]", "p2-b": "n[1]", "p3-c": "n[2]"}


def test_balanced_inflate_ranks_by_free_millicores_when_inflated() -> None:
    # b[0]: 2 CPUs, 1500m; b[1]: 1 CPU, 900m; maxCPUs 3.  1200m fits neither as it is
    # (balanced); inflated to 3 CPUs b[1] has 600m more free than b[0], so it takes it,
    # though b[0] has more free now
    cfg = {
        "reservedResources": {"cpu": "1"},
        "balloonTypes": [
            {"name": "b", "minBalloons": 2, "minCPUs": 1, "maxCPUs": 3, "namespaces": ["*"]},
        ],
    }
    p = policy(cfg)
    st = run(p, bctr("a", pod="p1", milli=1500), bctr("c", pod="p2", milli=900))
    assert _names(p, st) == {"p1-a": "b[0]", "p2-c": "b[1]"}
    d = p.allocate(st, bctr("d", pod="p3", milli=1200))
    assert d.state.members[ContainerID("p3-d")].balloon == "b[1]"
    assert d.reason.endswith("(balanced-inflate)")
    # 400m fits b[0] as it is: balanced, the most free now
    d = p.allocate(st, bctr("e", pod="p4", milli=400))
    assert d.state.members[ContainerID("p4-e")].balloon == "b[0]"
    assert d.reason.endswith("(balanced)")


def test_cpu_classes_of_balloons_and_idle() -> None:
    cfg = {
        "idleCPUClass": "lazy",
        "balloonTypes": [{"name": "t", "cpuClass": "turbo", "minBalloons": 1, "minCPUs": 2}],
    }
    p = policy(cfg)
    st = p.initial_state()
    classes = p.cpu_classes(st)
    assert classes["turbo"] == st.balloons["t[0]"].cpus
    assert classes["lazy"] == p.config.available - st.used


def test_memory_types_pin_the_matching_nodes() -> None:
    cfg = {
        "pinMemory": False,
        "balloonTypes": [{"name": "m", "pinMemory": True, "namespaces": ["*"]}],
    }
    p = policy(cfg)
    d = p.allocate(p.initial_state(), bctr("a", milli=1000))
    assert d.assignment is not None and d.assignment.mems == IDSet([0])
    p2 = policy({"pinMemory": False})
    d2 = p2.allocate(p2.initial_state(), bctr("a", milli=1000))
    assert d2.assignment is not None and d2.assignment.mems == IDSet()


def test_update_with_a_bigger_request_inflates_in_place() -> None:
    p = policy(FULL)
    st = run(p, bctr("a", pod="p1", ns="full-1", milli=1000))
    before = st.balloons["full[0]"].cpus
    d = p.update(st, bctr("a", pod="p1", ns="full-1", milli=2000))
    assert d.state.members[ContainerID("p1-a")].balloon == "full[0]"
    assert before < d.state.balloons["full[0]"].cpus
    assert p.update(d.state, bctr("a", pod="p1", ns="full-1", milli=2000)).reason == "unchanged"


def test_rebuild_keeps_placements_and_second_rebuild_moves_nothing() -> None:
    p = policy(FULL)
    cs = [
        bctr("a", pod="p1", ns="full-1", milli=1500),
        bctr("b", pod="p2", ns="full-1", milli=3000),
        bctr("c", pod="p3", ns="other", milli=200),
        bctr("k", pod="k", ns="kube-system", milli=100),
    ]
    st = run(p, *cs)
    rendered = p.render(st)
    reported = [
        bctr(
            c.name,
            pod=c.pod.name,
            ns=c.namespace,
            milli=c.request.cpu_request_milli,
            cur=str(rendered[c.id].cpus),
            cur_mems=str(rendered[c.id].mems),
        )
        for c in cs
    ]
    d = p.rebuild(reported)
    assert d.updates == ()
    p.check(d.state)
    assert p.render(d.state) == rendered


def test_rebuild_moves_containers_off_cpus_of_another_balloon() -> None:
    p = policy(FULL)
    cs = [
        bctr("a", pod="p1", ns="full-1", milli=2000, cur="4-5"),
        bctr("b", pod="p2", ns="full-1", milli=2000, cur="4-5"),
    ]
    d = p.rebuild(cs)
    p.check(d.state)
    # both fit one balloon of 4 CPUs, which keeps 4-5
    assert d.state.balloons["full[0]"].cpus >= IDSet.parse("4-5")
    assert len(d.state.balloons["full[0]"].cpus) == 4


def test_rebuild_fills_with_containers_on_too_few_cpus_for_their_balloon() -> None:
    # a live reconfiguration (their test06): b ran on one CPU of a type now gone and
    # matches type t (minCPUs 4); it joins a's balloon, which has room, as
    # nri-plugins' refill does, rather than growing a second balloon around CPU 8
    cfg = {
        "reservedResources": {"cpu": "1"},
        "balloonTypes": [{"name": "t", "minCPUs": 4, "namespaces": ["*"]}],
    }
    p = policy(cfg)
    d = p.rebuild(
        [
            bctr("a", pod="p1", milli=1000, cur="4-7"),
            bctr("b", pod="p2", milli=1000, cur="8"),
        ]
    )
    p.check(d.state)
    assert _names(p, d.state) == {"p1-a": "t[0]", "p2-b": "t[0]"}
    assert d.state.balloons["t[0]"].cpus == IDSet.parse("4-7")
    # (a's update only adds the memory nodes it was not reported with)
    assert {str(u.container_id): u.cpus for u in d.updates}.items() <= {
        "p1-a": IDSet.parse("4-7"),
        "p2-b": IDSet.parse("4-7"),
    }.items()
    assert "p2-b" in {str(u.container_id) for u in d.updates}


@pytest.mark.parametrize(
    ("key", "op", "values", "expected"),
    [
        ("name", Operator.EQUALS, ("c",), True),
        ("name", Operator.NOT_EQUAL, ("c",), False),
        ("pod/labels/app", Operator.IN, ("x", "y"), True),
        ("pod/labels/app", Operator.NOT_IN, ("x",), False),
        ("pod/labels/none", Operator.NOT_IN, ("x",), True),
        ("pod/labels/app", Operator.EXISTS, (), True),
        ("pod/labels/none", Operator.NOT_EXIST, (), True),
        ("namespace", Operator.MATCHES, ("prod-*",), True),
        ("namespace", Operator.MATCHES_NOT, ("prod-*",), False),
        ("pod/name", Operator.MATCHES_ANY, ("db-*", "web-*"), True),
        ("pod/name", Operator.MATCHES_NONE, ("db-*", "web-*"), False),
        ("qosclass", Operator.EQUALS, ("Burstable",), True),
        ("pod/qosclass", Operator.EQUALS, ("Burstable",), True),
        ("nothing", Operator.ALWAYS_TRUE, (), True),
        (":pod/labels/app:name", Operator.EQUALS, ("x:c",), True),
        (":,-pod/labels/app,name", Operator.EQUALS, ("x-c",), True),
    ],
    ids=lambda v: str(v),
)
def test_expressions(key: str, op: Operator, values: tuple[str, ...], expected: bool) -> None:
    c = bctr("c", pod="web-1", ns="prod-a", milli=100, labels={"app": "x"})
    assert evaluate(Expression(key=key, operator=op, values=values), c) is expected


def test_expand_and_key_value() -> None:
    c = bctr("c", pod="web-1", ns="prod-a", labels={"app": "x"})
    assert expand("${pod/labels/app}-${namespace}-${pod/labels/nope}", c) == "x-prod-a-"
    assert key_value(c, "pod/uid") == "uid-prod-a-web-1"
    assert key_value(c, "labels/app") is None


HYBRID = {
    "packages": 1,
    "nodes": 1,
    "cores": 8,
    "threads": 1,
    "memory": "2G",
    "efficient_cpus": "4-7",
    "isolated": "6-7",
}


@pytest.mark.parametrize(
    ("balloon_type", "expected"),
    [
        ({"preferCoreType": "efficient"}, "4-5"),
        ({"allocatorPriority": "low"}, "4-5"),
        ({"allocatorPriority": "high"}, "1-2"),
        ({"preferIsolCpus": True}, "6-7"),
        ({}, "1-2"),
    ],
    ids=["preferCoreType", "priority-low", "priority-high", "preferIsolCpus", "none"],
)
def test_cpu_preferences(balloon_type: dict[str, Any], expected: str) -> None:
    from tests.support.builders import topo

    cfg = {
        "reservedResources": {"cpu": "cpuset:0"},
        "balloonTypes": [{"name": "t", "namespaces": ["*"], **balloon_type}],
    }
    p = policy(cfg, topo(**HYBRID))
    st = run(p, bctr("a", milli=2000))
    assert st.balloons["t[0]"].cpus == IDSet.parse(expected)


def test_hide_hyperthreads_annotation_overrides_the_type_both_ways() -> None:
    from nri_resmgr.policy.topology_aware.preferences import HIDE_HYPERTHREADS

    hiding = {"balloonTypes": [{"name": "h", "hideHyperthreads": True, "minCPUs": 4}]}
    p = policy({**hiding, "balloonTypes": [{**hiding["balloonTypes"][0], "namespaces": ["*"]}]})
    d = p.allocate(p.initial_state(), bctr("a", milli=100, ann={HIDE_HYPERTHREADS: "false"}))
    assert d.assignment is not None and len(d.assignment.cpus) == 4
    p2 = policy({"balloonTypes": [{"name": "s", "minCPUs": 4, "namespaces": ["*"]}]})
    d2 = p2.allocate(p2.initial_state(), bctr("a", milli=100, ann={HIDE_HYPERTHREADS: "true"}))
    assert d2.assignment is not None and len(d2.assignment.cpus) == 2


def test_preserved_containers_are_left_alone() -> None:
    from nri_resmgr.policy.topology_aware.preferences import CPU_PRESERVE, MEMORY_PRESERVE

    cfg = {
        "preserve": {
            "matchExpressions": [{"key": "pod/name", "operator": "Matches", "values": ["vm-*"]}]
        },
        "balloonTypes": [{"name": "b", "namespaces": ["*"], "minCPUs": 2}],
    }
    p = policy(cfg)
    st = p.initial_state()
    for c in (bctr("a", pod="vm-1", milli=4000), bctr("x", milli=4000, ann={CPU_PRESERVE: "true"})):
        d = p.allocate(st, c)
        assert d.assignment is not None
        assert (d.assignment.cpus, d.assignment.kind) == (IDSet(), CPUKind.NONE)
        assert d.state == st and d.reason.startswith("preserved: ")
    # kept out of a rebuild: no update, no balloon
    r = p.rebuild([bctr("a", pod="vm-1", milli=4000, cur="0-31")])
    assert r.updates == () and not r.state.members
    d = p.allocate(st, bctr("m", milli=1000, ann={MEMORY_PRESERVE: "true"}))
    assert d.assignment is not None and d.assignment.cpus and d.assignment.mems == IDSet()


@pytest.mark.parametrize("balancing", [False, True], ids=["packed", "balanced"])
def test_allocator_topology_balancing_spreads_new_balloons(balancing: bool) -> None:
    cfg = {
        "reservedResources": {"cpu": "cpuset:0"},
        "allocatorTopologyBalancing": balancing,
        "balloonTypes": [{"name": "b", "namespaces": ["*"], "preferNewBalloons": True}],
    }
    p = policy(cfg)
    st = run(p, bctr("a", pod="p1", milli=2000), bctr("c", pod="p2", milli=2000))
    nodes = [p.topology.nodes_of(st.balloons[n].cpus) for n in ("b[0]", "b[1]")]
    assert (nodes[0] != nodes[1]) is balancing


@pytest.mark.parametrize("spread", [False, True], ids=["siblings", "spread"])
def test_prefer_spread_on_physical_cores(spread: bool) -> None:
    cfg = {
        "reservedResources": {"cpu": "cpuset:0"},
        "balloonTypes": [{"name": "b", "namespaces": ["*"], "preferSpreadOnPhysicalCores": spread}],
    }
    p = policy(cfg)
    st = run(p, bctr("a", milli=2000))
    cores = p.topology.cores_of(st.balloons["b[0]"].cpus)
    assert len(cores) == (2 if spread else 1)


SCHED: dict[str, Any] = {
    "reservedResources": {"cpu": "1"},
    "schedulingClasses": [
        {"name": "realtime", "policy": "fifo", "priority": 42},
        {"name": "idle", "policy": "idle", "nice": 17, "ioClass": "be", "ioPriority": 6},
    ],
    "balloonTypes": [
        {"name": "rt", "schedulingClass": "realtime", "namespaces": ["rt"]},
        {"name": "plain", "namespaces": ["plain"]},
    ],
}


@pytest.mark.parametrize(
    ("ns", "annotations", "expected"),
    [
        ("rt", None, "realtime"),  # the balloon type's class
        ("rt", {SCHEDULING_CLASS_ANNOTATION: "idle"}, "idle"),  # the annotation's first
        ("plain", {f"{SCHEDULING_CLASS_ANNOTATION}/pod": "realtime"}, "realtime"),
        ("plain", None, None),  # neither: the runtime's defaults
    ],
    ids=["type", "annotation-over-type", "annotation", "none"],
)
def test_scheduling_class_of_the_balloon_type_or_the_annotation(
    ns: str, annotations: dict[str, str] | None, expected: str | None
) -> None:
    p = policy(SCHED)
    d = p.allocate(p.initial_state(), bctr("a", ns=ns, milli=100, ann=annotations))
    assert d.assignment is not None
    got = d.assignment.scheduling
    assert (got.name if got is not None else None) == expected


def test_scheduling_classes_need_the_runtime_scheduler_fields() -> None:
    assert [r.field for r in policy(SCHED).scheduling.nri_requirements()] == [
        "LinuxScheduler",
        "LinuxIOPriority",
    ]
    assert policy(FULL).scheduling.nri_requirements() == ()


def test_undefined_scheduling_class_of_a_type_is_a_config_error() -> None:
    cfg = {
        "schedulingClasses": [{"name": "realtime", "policy": "fifo", "priority": 42}],
        "balloonTypes": [{"name": "rt", "schedulingClass": "fast"}],
    }
    with pytest.raises(
        ConfigError,
        match=r"balloonTypes\[rt\]\.schedulingClass: expected one of "
        r"schedulingClasses \(realtime\), found 'fast'",
    ):
        policy(cfg)


def test_an_unknown_annotated_scheduling_class_fails_the_container() -> None:
    p = policy(SCHED)
    c = bctr("a", ns="rt", ann={SCHEDULING_CLASS_ANNOTATION: "turbo"})
    with pytest.raises(AnnotationError, match=r"'turbo'; expected one of .*idle, realtime"):
        p.allocate(p.initial_state(), c)
