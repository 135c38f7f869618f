"""The balloons CPU tree (allocation.py): where balloons grow, what they give back."""

from __future__ import annotations

from typing import Any

import pytest

from nri_resmgr.policy.balloons.allocation import CPUTree, Hint, TreeOptions, grow, shrink
from nri_resmgr.topology.cpuset import IDSet
from tests.support.balloons import bctr, machine, policy, run
from tests.support.builders import topo

# the support machine: node 0 is 0-3,16-19 (cores 0-3, threads n and n+16), node 1 4-7,20-23


def _names(tree: Any, depth: int) -> list[str]:
    nodes = [tree]
    for _ in range(depth):
        nodes = [c for n in nodes for c in n.children]
    return [n.name for n in nodes]


def test_tree_levels_and_the_split_by_thread() -> None:
    tree = CPUTree.of(machine())
    assert _names(tree.plain, 1) == ["p0", "p1"]
    assert _names(tree.plain, 3)[:2] == ["p0d0n0", "p0d0n1"]
    node0 = tree.plain.children[0].children[0].children[0]
    assert node0.cpus == frozenset({0, 1, 2, 3, 16, 17, 18, 19})
    assert [c.name for c in node0.children[0].children] == ["p0d0n0cpu0"]
    assert [t.name for t in node0.children[0].children[0].children] == [
        "p0d0n0cpu0t0",
        "p0d0n0cpu0t16",
    ]
    split0 = tree.split.children[0].children[0].children[0]
    assert [(c.name, sorted(c.cpus)) for c in split0.children] == [
        ("p0d0n0class0", [0, 1, 2, 3]),
        ("p0d0n0class1", [16, 17, 18, 19]),
    ]


def _grow(current: str, free: str, delta: int, **opts: Any) -> IDSet:
    t = machine()
    got = grow(
        t,
        CPUTree.of(t),
        current=IDSet.parse(current),
        free=IDSet.parse(free),
        delta=delta,
        opts=TreeOptions(**opts),
    )
    assert got is not None
    return got


def test_grows_where_the_balloon_already_is() -> None:
    # node 1 has more free CPUs, but the balloon is on node 0
    assert _grow("0", "1-2,4-7,20-23", 1) <= IDSet.parse("1-2")
    assert _grow("0", "1-2,4-7,20-23", 1, balancing=True) <= IDSet.parse("1-2")


@pytest.mark.parametrize(
    ("balancing", "expected"), [(False, "1,17"), (True, "4,20")], ids=["packed", "balanced"]
)
def test_a_new_balloon_packs_or_balances(balancing: bool, expected: str) -> None:
    # node 0 has 4 CPUs free, node 1 8: packing fills node 0, balancing takes node 1
    assert _grow("", "1-2,17-18,4-7,20-23", 2, balancing=balancing) == IDSet.parse(expected)


def test_spread_takes_one_thread_of_each_core() -> None:
    got = _grow("", "0-3,16-19", 3, spread=True)
    assert len(machine().cores_of(got)) == 3
    assert len(machine().cores_of(_grow("", "0-3,16-19", 2))) == 1


def test_hints_narrow_the_free_cpus_while_enough_are_left() -> None:
    near = (Hint(IDSet.parse("5-6")),)
    assert _grow("", "0-7", 2, hints=near) == IDSet.parse("5-6")
    # too few in the hint: it is dropped, not half applied
    assert _grow("", "0-7", 3, hints=near) == _grow("", "0-7", 3)
    far = (Hint(IDSet.parse("0-6"), far=True),)
    assert _grow("", "0-7", 1, hints=far) == IDSet([7])
    assert len(_grow("", "0-7", 2, hints=far)) == 2  # cannot keep away: given way


def _shrink(current: str, free: str, count: int, **opts: Any) -> IDSet:
    t = machine()
    return shrink(
        t,
        CPUTree.of(t),
        current=IDSet.parse(current),
        free=IDSet.parse(free),
        count=count,
        opts=TreeOptions(**opts),
    )


def test_shrink_gives_back_the_stray_cpus_first() -> None:
    # three CPUs on node 0, one on node 1: the one on node 1 goes
    assert _shrink("0-1,16,4", "2-3,5-7", 1) == IDSet([4])
    # unless it is close-hinted: then the one no hint wants goes
    assert _shrink("0-1,16,4", "2-3,5-7", 1, hints=(Hint(IDSet.parse("0-1,4")),)) == IDSet([16])


def test_prefer_spread_on_physical_cores_policy_wide_and_per_type() -> None:
    cfg = {
        "reservedResources": {"cpu": "cpuset:0"},
        "preferSpreadOnPhysicalCores": True,
        "balloonTypes": [
            {"name": "spread", "namespaces": ["spread"]},
            {"name": "packed", "namespaces": ["packed"], "preferSpreadOnPhysicalCores": False},
        ],
    }
    p = policy(cfg)
    st = run(p, bctr("a", ns="spread", milli=2000), bctr("b", ns="packed", milli=2000))
    assert len(p.topology.cores_of(st.balloons["spread[0]"].cpus)) == 2
    assert len(p.topology.cores_of(st.balloons["packed[0]"].cpus)) == 1


ISOLATED = {"packages": 1, "nodes": 1, "cores": 4, "threads": 2, "memory": "2G", "isolated": "0-1"}


def test_isolated_cpus_go_to_prefer_isol_cpus_balloons_only() -> None:
    cfg = {
        "reservedResources": {"cpu": "1"},
        "balloonTypes": [
            {"name": "iso", "namespaces": ["iso"], "preferIsolCpus": True},
            {"name": "b", "namespaces": ["*"]},
        ],
    }
    p = policy(cfg, topo(**ISOLATED))
    st = run(p, bctr("a", milli=2000), bctr("i", ns="iso", milli=2000))
    assert st.balloons["iso[0]"].cpus == IDSet.parse("0-1")
    assert st.balloons["b[0]"].cpus.isdisjoint(IDSet.parse("0-1"))
    assert st.balloons["reserved[0]"].cpus.isdisjoint(IDSet.parse("0-1"))
    # the others take isolated CPUs only when nothing else is left (a soft hint)
    st = run(p, bctr("a", milli=7000))
    assert len(st.balloons["b[0]"].cpus) == 7


def test_a_reserved_cpuset_is_avoided_by_the_other_balloons() -> None:
    cfg = {
        "reservedResources": {"cpu": "cpuset:0-3"},
        "balloonTypes": [
            {"name": "reserved", "minCPUs": 1},
            {"name": "b", "namespaces": ["*"]},
        ],
    }
    p = policy(cfg, topo(**{**ISOLATED, "isolated": ""}))
    st = run(p, bctr("a", milli=2000))
    assert st.balloons["reserved[0]"].cpus <= IDSet.parse("0-3")
    assert st.balloons["b[0]"].cpus.isdisjoint(IDSet.parse("0-3"))


def test_share_idle_cpus_in_same_l2cache() -> None:
    # each core has its own L2 here: a one-CPU balloon shares its idle sibling thread
    cfg = {
        "reservedResources": {"cpu": "cpuset:31"},
        "allocatorTopologyBalancing": True,
        "balloonTypes": [{"name": "s", "namespaces": ["*"], "shareIdleCPUsInSame": "l2cache"}],
    }
    p = policy(cfg)
    d = p.allocate(p.initial_state(), bctr("a", milli=1000))
    assert d.assignment is not None
    (cpu,) = d.state.balloons["s[0]"].cpus
    assert d.assignment.cpus == p.topology.siblings(cpu)


# ---- the sort keys as the module docstring writes them, over every node of the tree ----


def _by_key(root: Any, current: IDSet, free: IDSet, delta: int, balancing: bool) -> IDSet:
    """The node the documented sort key picks, each node keyed by its own path."""
    found: list[tuple[Any, Any]] = []

    def walk(node: Any, depth: int, curs: tuple[int, ...], frees: tuple[int, ...]) -> None:
        cur, fr = len(node.cpus & current.ids()), len(node.cpus & free.ids())
        if (fr if delta > 0 else cur) < abs(delta):
            return
        curs, frees = (*curs, cur), (*frees, fr)
        if delta > 0:
            sign = -1 if balancing else 1
            key = (-depth, tuple(-c for c in curs), tuple(sign * f for f in frees), node.name)
        else:
            key = (-depth, curs, frees, (*(-ord(ch) for ch in node.name), 1))
        found.append((key, node))
        for child in node.children:
            walk(child, depth + 1, curs, frees)

    walk(root, 0, (), ())
    best = min(found, key=lambda kn: kn[0])[1]
    return IDSet(best.cpus & (free if delta > 0 else current).ids())


@pytest.mark.parametrize("seed", range(40))
def test_the_local_set_is_the_documented_sort_key(seed: int) -> None:
    import random

    from nri_resmgr.policy.balloons.allocation import Levels, _local_add, _local_remove

    rnd = random.Random(seed)
    t = machine()
    tree = CPUTree.of(t)
    cpus = t.online_cpus().sorted()
    rnd.shuffle(cpus)
    current = IDSet(cpus[: rnd.randint(1, 6)])
    free = IDSet(cpus[8 : 8 + rnd.randint(4, 20)])
    spread = rnd.random() < 0.5
    root = tree.split if spread else tree.plain
    levels = Levels.of(root)
    for delta in (1, 2, 3):
        for balancing in (False, True):
            assert _local_add(levels, current, free, delta, balancing) == _by_key(
                root, current, free, delta, balancing
            )
        if delta <= len(current):
            assert _local_remove(levels, current, free, delta) == _by_key(
                root, current, free, -delta, False
            )
