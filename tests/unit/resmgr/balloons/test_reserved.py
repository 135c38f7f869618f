"""The reserved balloon: where ``reservedResources`` puts it, and that it stays there.

The unit machine's available CPUs here are their test18's ``cpuset:2-7,10-13``: package 0
has six of them (2-7), package 1 four (node 2: 10-11, node 3: 12-13).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from nri_resmgr.topology.cpuset import IDSet
from tests.support.balloons import bctr, policy, run

AVAILABLE = {"availableResources": {"cpu": "cpuset:2-7,10-13"}}


def _cfg(reserved: str, *types: dict[str, Any]) -> dict[str, Any]:
    return {**AVAILABLE, "reservedResources": {"cpu": reserved}, "balloonTypes": list(types)}


@pytest.mark.parametrize(
    ("reserved", "cpus"),
    [("750m", "10"), ("2", "10-11"), ("cpuset:3", "3"), ("cpuset:2,13", "2,13")],
    ids=["750m-packed", "2-packed", "cpuset", "cpuset-split"],
)
def test_a_quantity_is_placed_by_the_cpu_tree_and_a_cpuset_where_it_says(
    reserved: str, cpus: str
) -> None:
    # a quantity: packed into package 1, which has fewer free CPUs (theirs: CPU 10), not
    # the lowest available CPU 2
    p = policy(_cfg(reserved))
    st = p.initial_state()
    assert st.balloons["reserved[0]"].cpus == IDSet.parse(cpus) == p.reserved_home


def test_the_home_is_where_the_initial_state_puts_the_reserved_balloon() -> None:
    # a type placed before the reserved one takes node 2 first; the home is what is left
    p = policy(
        _cfg("750m", {"name": "first", "minBalloons": 1, "minCPUs": 2}, {"name": "reserved"})
    )
    st = p.initial_state()
    assert st.balloons["first[0]"].cpus == IDSet.parse("10-11")
    assert st.balloons["reserved[0]"].cpus == p.reserved_home == IDSet([12])


def test_the_reserved_balloon_deflates_back_to_its_home() -> None:
    # inflated by two at once it grows into node 3 (12-13); the CPU tree alone would then
    # give back its lone CPU in node 2, its home
    p = policy(_cfg("750m"))
    k = bctr("k", pod="k", ns="kube-system", milli=3000)
    st = run(p, k)
    assert st.balloons["reserved[0]"].cpus == IDSet.parse("10,12-13")
    assert p.release(st, k.id).state.balloons["reserved[0]"].cpus == IDSet([10])


def test_a_rebuild_puts_the_empty_reserved_balloon_back_home() -> None:
    # big takes 2-6; rebuilt, the CPU tree alone would pack the empty reserved balloon
    # onto package 0's last free CPU, 7
    p = policy(_cfg("750m", {"name": "big", "namespaces": ["big"]}))
    c = bctr("a", pod="p1", ns="big", milli=5000)
    st = run(p, c)
    assert st.balloons["big[0]"].cpus == IDSet.parse("2-6")
    r = p.render(st)
    d = p.rebuild([replace(c, current_cpus=r[c.id].cpus, current_mems=r[c.id].mems)])
    assert d.updates == ()
    assert d.state.balloons == st.balloons
