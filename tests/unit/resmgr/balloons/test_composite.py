"""Composite balloons: ``components`` and ``componentCreation`` (nri-plugins' rules).

The machine has performance cores 0-7 and efficient cores 8-15, of which 12-15 are
isolated, so component types that prefer each kind show where each component's CPUs
went (``preferCoreType``, ``preferIsolCpus``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from nri_resmgr.kube.report import PoolReporter
from nri_resmgr.model import AllocationError, ConfigError
from nri_resmgr.ops.metrics import StateSnapshot, balloon_snapshots
from nri_resmgr.policy.balloons import BALLOON_ANNOTATION, BalloonsPolicy, BalloonsState
from nri_resmgr.policy.balloons.invariants import violations
from nri_resmgr.policy.balloons.state import Balloon
from nri_resmgr.topology.cpuset import IDSet
from tests.support.balloons import bctr, policy, run
from tests.support.builders import topo
from tests.unit.resmgr.balloons.test_props import CONFIGS as PROPS

MACHINE = {
    "packages": 1,
    "nodes": 1,
    "cores": 16,
    "threads": 1,
    "memory": "2G",
    "efficient_cpus": "8-15",
    "isolated": "12-15",
}
PERF = IDSet.parse("1-7")  # cpu0 is reserved
EFF = IDSet.parse("8-11")
ISOL = IDSet.parse("12-15")


def _cfg(*types: dict[str, Any], **opts: Any) -> dict[str, Any]:
    leaves = [
        {"name": "perf", "preferCoreType": "performance"},
        {"name": "eff", "preferCoreType": "efficient"},
        {"name": "isol", "preferIsolCpus": True},
    ]
    return {"reservedResources": {"cpu": "cpuset:0"}, "balloonTypes": [*leaves, *types], **opts}


def _comps(*names: str) -> list[dict[str, str]]:
    return [{"balloonType": n} for n in names]


def _policy(*types: dict[str, Any], **opts: Any) -> BalloonsPolicy:
    return policy(_cfg(*types, **opts), topo(**MACHINE))


def _in(t: str, name: str, *, pod: str | None = None, milli: int = 1000) -> Any:
    return bctr(name, pod=pod or name, milli=milli, ann={BALLOON_ANNOTATION: t})


def _leaves(b: Balloon) -> list[tuple[str, IDSet]]:
    return [(x.type, x.cpus) for x in b.walk() if not x.components]


def test_components_get_equal_shares_of_the_requests() -> None:
    p = _policy({"name": "both", "components": _comps("perf", "eff")})
    st = run(p, _in("both", "a", milli=3000))
    b = st.balloons["both[0]"]
    # 1500m each: two CPUs each, four in all (not the three 3000m would need alone)
    assert [(t, len(c)) for t, c in _leaves(b)] == [("perf", 2), ("eff", 2)]
    assert b.components[0].cpus <= PERF and b.components[1].cpus <= EFF
    assert b.cpus == b.components[0].cpus | b.components[1].cpus
    st2 = p.allocate(st, _in("both", "b", pod="a", milli=1000)).state
    assert st2.balloons["both[0]"] == b  # 2000m each still fits in two
    st3 = p.allocate(st2, _in("both", "c", pod="a", milli=1000)).state
    p.check(st3)
    b3 = st3.balloons["both[0]"]
    assert [len(c) for _, c in _leaves(b3)] == [3, 3]
    assert b.components[0].cpus <= b3.components[0].cpus <= PERF
    assert b.components[1].cpus <= b3.components[1].cpus <= EFF


def test_nested_composite_shares_and_min_cpus() -> None:
    p = _policy(
        {"name": "pe", "components": _comps("perf", "eff")},
        {"name": "top", "components": _comps("pe", "isol"), "minCPUs": 4},
    )
    # max(1000m, minCPUs 4) = 4000m: 2000m to pe (1000m each), 2000m to isol
    st = run(p, _in("top", "a"))
    b = st.balloons["top[0]"]
    assert [(t, len(c)) for t, c in _leaves(b)] == [("perf", 1), ("eff", 1), ("isol", 2)]
    assert p.needed_cpus(b, 1000, occupied=True) == 4
    (_, pc), (_, ec), (_, ic) = _leaves(b)
    assert pc <= PERF and ec <= EFF and ic <= ISOL
    # 10000m: 5000m to pe (2500m each: three CPUs each), 5000m to isol: five, the four
    # isolated ones and then any
    st = p.allocate(st, _in("top", "b", pod="a", milli=9000)).state
    p.check(st)
    leaves = _leaves(st.balloons["top[0]"])
    assert [len(c) for _, c in leaves] == [3, 3, 5]
    assert pc <= leaves[0][1] <= PERF and ec <= leaves[1][1] <= EFF and leaves[2][1] > ISOL


def test_an_empty_composite_goes_whole() -> None:
    p = _policy(
        {"name": "pe", "components": _comps("perf", "eff")},
        {"name": "top", "components": _comps("pe", "isol")},
    )
    start = p.initial_state()
    st = run(p, _in("top", "a", milli=4000))
    assert len(st.balloons["top[0]"].cpus) == 4
    st = p.release(st, next(iter(st.members))).state
    assert "top[0]" not in st.balloons
    assert st.used == start.used


def test_component_creation_balance_balloons() -> None:
    p = _policy(
        {"name": "pe", "components": _comps("perf", "eff")},
        {
            "name": "alt",
            "components": _comps("perf", "eff"),
            "componentCreation": "balance-balloons",
            "preferNewBalloons": True,
        },
        {
            "name": "alt2",
            "components": _comps("pe", "isol"),
            "componentCreation": "balance-balloons",
            "preferNewBalloons": True,
        },
    )
    st = run(p, *(_in("alt", f"c{i}") for i in range(3)))
    kinds = [[x.type for x in st.balloons[f"alt[{i}]"].components] for i in range(3)]
    assert kinds == [["perf"], ["eff"], ["perf"]]  # fewest instances, then the first
    # pe counts the perf and eff instances inside the alt balloons (2 + 1), isol none
    st = p.allocate(st, _in("alt2", "d")).state
    assert [x.type for x in st.balloons["alt2[0]"].components] == ["isol"]
    st = p.allocate(st, _in("alt2", "e")).state
    assert [x.type for x in st.balloons["alt2[1]"].components] == ["isol"]  # 1 < 3
    # a top-level eff balloon counts as well: now eff has 2 and perf 2, perf is first
    st = p.allocate(st, _in("eff", "f")).state
    st = p.allocate(st, _in("alt", "g")).state
    assert [x.type for x in st.balloons["alt[3]"].components] == ["perf"]
    p.check(st)


def test_component_max_cpus_limits_the_composite() -> None:
    cfg = _cfg({"name": "both", "components": _comps("perf", "eff"), "maxBalloons": 1})
    cfg["balloonTypes"][0]["maxCPUs"] = 2
    p = policy(cfg, topo(**MACHINE))
    st = run(p, _in("both", "a", milli=4000))
    with pytest.raises(AllocationError, match=r"perf\[0\] would need 3 CPUs; maxCPUs is 2"):
        p.allocate(st, _in("both", "b", pod="a"))
    q = _policy({"name": "both", "components": _comps("perf", "eff"), "maxCPUs": 3})
    with pytest.raises(AllocationError, match=r"both\[0\] would need 4 CPUs; maxCPUs is 3"):
        run(q, _in("both", "a", milli=2500))


def test_component_types_keep_their_own_max_balloons() -> None:
    # as in nri-plugins, maxBalloons counts a type's own balloons, and a component is made
    # like one of them: with eff's one balloon there, no composite can get an eff part
    cfg = _cfg({"name": "both", "components": _comps("perf", "eff")})
    cfg["balloonTypes"][1].update(minBalloons=1, maxBalloons=1)
    p = policy(cfg, topo(**MACHINE))
    with pytest.raises(AllocationError, match="its component no new eff balloon"):
        run(p, _in("both", "a"))


def test_components_carry_the_cpu_classes() -> None:
    cfg = _cfg({"name": "both", "components": _comps("perf", "eff")})
    cfg["balloonTypes"][0]["cpuClass"] = "turbo"
    p = policy(cfg, topo(**MACHINE))
    st = run(p, _in("both", "a", milli=4000))
    assert p.cpu_classes(st) == {"turbo": st.balloons["both[0]"].components[0].cpus}


def _rebuild_twice(p: BalloonsPolicy, st: BalloonsState, containers: list[Any]) -> BalloonsState:
    rendered = p.render(st)
    reported = [
        replace(c, current_cpus=rendered[c.id].cpus, current_mems=rendered[c.id].mems)
        for c in reversed(containers)
    ]
    first = p.rebuild(reported)
    p.check(first.state)
    assert first.updates == ()
    again = p.rebuild([replace(c, current_cpus=p.render(first.state)[c.id].cpus) for c in reported])
    assert again.updates == ()
    return first.state


def test_rebuild_keeps_composites_and_their_components() -> None:
    p = _policy(
        {"name": "pe", "components": _comps("perf", "eff")},
        {"name": "top", "components": _comps("pe", "isol"), "minCPUs": 4, "minBalloons": 1},
        {
            "name": "alt",
            "components": _comps("perf", "eff"),
            "componentCreation": "balance-balloons",
            "preferNewBalloons": True,
        },
    )
    cs = [_in("top", "a", milli=1500), *(_in("alt", f"b{i}") for i in range(3))]
    st = run(p, *cs)
    got = _rebuild_twice(p, st, cs)
    by_cpus = {b.cpus: _leaves(b) for b in st.balloons.values()}
    # every balloon is back on its CPUs, and each component on its own ones: the alt
    # balloons claim the component their CPUs suit, whatever order they come back in
    assert {b.cpus: _leaves(b) for b in got.balloons.values()} == by_cpus


@pytest.mark.parametrize(
    ("types", "fragment"),
    [
        (
            [{"name": "x", "components": _comps("perf"), "componentCreation": "each"}],
            "balloon type x: componentCreation is 'each'; expected one of all, balance-balloons",
        ),
        (
            [{"name": "x", "componentCreation": "all"}],
            "balloon type x: componentCreation is 'all' but there are no components",
        ),
        (
            [{"name": "x", "components": _comps("y")}, {"name": "y", "components": _comps("x")}],
            "balloon type x: components form a cycle x -> y -> x",
        ),
        (
            [{"name": "x", "components": _comps("perf"), "preferIsolCpus": True}],
            "balloon type x: a composite type sets preferIsolCpus; expected CPU allocation",
        ),
    ],
    ids=["unknown-creation", "creation-without-components", "cycle", "allocation-option"],
)
def test_composite_config_errors(types: list[dict[str, Any]], fragment: str) -> None:
    with pytest.raises(ConfigError, match="policy balloons: ") as exc:
        _policy(*types)
    assert fragment in str(exc.value)


def test_invariants_see_broken_composites() -> None:
    p = _policy({"name": "both", "components": _comps("perf", "eff")})
    st = run(p, _in("both", "a", milli=4000))
    b = st.balloons["both[0]"]
    perf, eff = b.components
    bad = {
        "overlap": replace(b, components=(perf, replace(eff, cpus=eff.cpus | perf.cpus))),
        "types": replace(b, components=(eff, perf)),
        "union": replace(b, cpus=b.cpus | IDSet([15])),
        "share": replace(b, components=(perf, replace(eff, cpus=IDSet([8])))),
    }
    expected = {
        "overlap": "the components of both[0] overlap",
        "types": "has components ['eff', 'perf']; expected ['perf', 'eff']",
        "union": "holds",
        "share": "component eff[0] has 1 CPUs; its share needs 2",
    }
    for key, broken in bad.items():
        found = violations(p, st.with_balloon(broken))
        assert any(expected[key] in line for line in found), (key, found)


def _rebuilt_after(config: dict[str, Any], *steps: tuple[str, str, int, str]) -> Any:
    """The first rebuild from where containers (pod, namespace, milli, app label) run
    after being created in order on the unit machine; `_rebuild_twice` checks that it
    and a second one move nothing."""
    p = policy(config)
    st = p.initial_state()
    cs = [
        bctr("c0", pod=pod, ns=ns, milli=milli, labels={"app": app})
        for pod, ns, milli, app in steps
    ]
    for c in cs:
        st = p.allocate(st, c).state
    return _rebuild_twice(p, st, cs)


def test_rebuild_keeps_own_cpus_in_domains_others_share() -> None:
    # trio[1] spans three NUMA nodes, sharing their idle CPUs, and trio[0] shares two of
    # them: which of its CPUs there were its own shows, and it keeps exactly those
    got = _rebuilt_after(
        PROPS[2], ("pod1", "grp", 0, "a0"), ("pod0", "grp", 2500, "a1"), ("pod2", "grp", 1000, "a1")
    )
    assert len(got.balloons) == 4


def test_rebuild_puts_a_composite_reserved_balloon_back() -> None:
    # the pair and leafa balloons have no CPUs: their containers run on the reserved
    # balloon's, which is composite and would take other CPUs if made anew
    got = _rebuilt_after(PROPS[2], ("pod0", "new", 0, "a0"), ("pod1", "full", 0, "a0"))
    assert "reserved[0]" in got.balloons


def test_rebuild_gives_the_reserved_balloon_its_reserved_cpus() -> None:
    # two groups on the reserved CPUs, in one cpuset: no balloon claims them, and the
    # reserved balloon takes its home back, where the CPU tree put it at the start
    got = _rebuilt_after(PROPS[0], ("pod0", "grp", 0, "a1"), ("pod1", "grp", 0, "a0"))
    home = policy(PROPS[0]).initial_state().balloons["reserved[0]"].cpus
    assert got.balloons["reserved[0]"].cpus == home == IDSet([10])


def test_rebuild_keeps_a_cpu_in_each_domain_a_composite_spans() -> None:
    # trio[0]'s components are on three NUMA nodes; alone there, it shares their idle
    # CPUs, and any CPU of each node keeps that view
    got = _rebuilt_after(PROPS[2], ("pod0", "grp", 0, "a0"))
    assert len(got.balloons["trio[0]"].cpus) == 3


def _rebuilt_from(config: dict[str, Any], reports: list[Any]) -> Any:
    """A rebuild from `reports`, then a second one from its result: that moves nothing."""
    p = policy(config)
    d = p.rebuild(reports)
    p.check(d.state)
    r = p.render(d.state)
    again = [replace(c, current_cpus=r[c.id].cpus, current_mems=r[c.id].mems) for c in reports]
    d2 = p.rebuild(again)
    p.check(d2.state)
    assert d2.updates == ()
    return d.state


def test_second_rebuild_puts_empty_balloons_back_in_shared_domains() -> None:
    # trio[0] shares the idle CPUs of its NUMA nodes; the composite reserved balloon sits
    # on an unreported CPU in one of them, and goes back there, not to any unseen CPU
    reports = [
        bctr("c0", pod="pod0", ns="full", labels={"app": "a0"}),
        bctr("c0", pod="pod1", ns="full", milli=100, labels={"app": "a0"}, cur="0-2,4,8-10,12,28"),
        bctr("c1", pod="pod0", ns="grp", labels={"app": "a0"}),
    ]
    _rebuilt_from(PROPS[2], reports)


def test_rebuild_ignores_unknown_cpus_a_cpu_less_balloon_reports() -> None:
    # leafa's containers have no CPUs of their own and report the reserved balloon's
    # CPUs, here with one the machine does not have
    reports = [
        bctr("c0", pod="pod1", ns="full", milli=2500, labels={"app": "a0"}, cur="0-2"),
        bctr("c1", pod="pod0", ns="full", labels={"app": "a0"}, cur="0-2,32"),
    ]
    st = _rebuilt_from(PROPS[2], reports)
    assert st.balloons["reserved[0]"].cpus <= IDSet.parse("0-31")


def test_nrt_shows_the_component_cpusets_of_a_composite() -> None:
    p = _policy(
        {"name": "pe", "components": _comps("perf", "eff")},
        {"name": "top", "components": _comps("pe", "isol"), "minCPUs": 4},
    )
    st = run(p, _in("top", "a"))
    (_, pc), (_, ec), (_, ic) = _leaves(st.balloons["top[0]"])
    snap = StateSnapshot(balloons=balloon_snapshots(p, st))
    zones = {z["name"]: z for z in PoolReporter(lambda: snap, "balloons").report()["zones"]}
    attrs = {a["name"]: a["value"] for a in zones["top[0]"]["attributes"]}
    assert attrs["component cpusets"] == f"{{{{{{{pc}}}, {{{ec}}}}}, {{{ic}}}}}"
    assert attrs["cpuset"] == str(pc | ec | ic)
    assert attrs["excess cpus"] == "3000m"  # 4 CPUs, 1000m requested
    assert "component cpusets" not in {a["name"] for a in zones["reserved[0]"]["attributes"]}


def test_an_updated_request_resizes_the_composite_in_place() -> None:
    p = _policy({"name": "both", "components": _comps("perf", "eff")})
    st = run(p, _in("both", "a", milli=2000))
    before = st.balloons["both[0]"]
    d = p.update(st, _in("both", "a", milli=6000))
    p.check(d.state)
    after = d.state.balloons["both[0]"]
    assert [len(c.cpus) for c in after.components] == [3, 3]
    assert before.components[0].cpus < after.components[0].cpus <= PERF
    assert before.components[1].cpus < after.components[1].cpus <= EFF
    d = p.update(d.state, _in("both", "a", milli=1000))
    assert [len(c.cpus) for c in d.state.balloons["both[0]"].components] == [1, 1]


def test_a_composite_with_best_effort_containers_has_a_cpu_per_component() -> None:
    p = _policy({"name": "both", "components": _comps("perf", "eff")})
    st = run(p, _in("both", "a", milli=0))
    b = st.balloons["both[0]"]
    assert [(t, len(c)) for t, c in _leaves(b)] == [("perf", 1), ("eff", 1)]
    st = p.release(st, next(iter(st.members))).state
    assert "both[0]" not in st.balloons
