"""Issue 24: with the placement records lost, the balloons rebuild keeps every valid
placement, or moves it with a stated cause (`restart_rule.unexplained_moves`).

Each case is an example the restart property (test_restart.py) found moving a container
whose placement was valid with no cause in the rebuild's reason, shrunk to the steps
that show it.
"""

from __future__ import annotations

from typing import Any

from nri_resmgr.policy.kit.annotations import HIDE_HYPERTHREADS
from nri_resmgr.topology.load import load_topology
from tests.support.balloons import bctr, policy, run
from tests.support.restart_rule import reports_of, unexplained_moves
from tests.unit.resmgr.balloons.test_restart import ANYWHERE


def test_a_member_hiding_hyperthreads_and_one_seeing_them_stay_in_one_balloon() -> None:
    """Two-socket, ``composites`` then ``balance``: c0 hides hyperthreads and sees
    one thread of each core of ``default[0]`` (2 and the idle 3-7, 10-15 it shares),
    2-7; c1, in the same balloon, sees every thread, 2-7,10-15.  Their reports differ,
    so the rebuild took them for two balloons and moved c1 to a new ``default[1]``,
    saying only "rebuilt"."""
    t = load_topology("two-socket")
    before = policy(ANYWHERE["composites"], t)
    c0 = bctr("c0", pod="p0", ns="grp", ann={HIDE_HYPERTHREADS: "true"}, labels={"app": "a0"})
    c1 = bctr("c1", pod="p0", ns="grp", labels={"app": "a0"})
    p = policy(ANYWHERE["balance"], t)  # a reconfiguration: c0 rebuilt, then c1 comes
    st = p.rebuild(reports_of(before, run(before, c0), [c0])).state
    st = p.allocate(st, c1).state
    assert st.members[c0.id].balloon == st.members[c1.id].balloon == "default[0]"
    reports = reports_of(p, st, [c0, c1])
    assert reports[0].current_cpus != reports[1].current_cpus, "pick another case"
    d = p.rebuild(reports)
    assert unexplained_moves(d) == [], d.reason
    assert (d.updates, d.state) == ((), st)


def test_a_move_the_rebuild_cannot_avoid_names_the_container_and_its_cause() -> None:
    """A live reconfiguration adds ``groupBy`` to a type whose balloon holds containers
    of two groups: no claim keeps them together, and the one placed away is moved with
    the cause in the reason."""
    grp: dict[str, Any] = {"name": "grp", "namespaces": ["grp"], "minCPUs": 1}
    config: dict[str, Any] = {"reservedResources": {"cpu": "1"}, "balloonTypes": [grp]}
    p = policy(config)
    cs = [bctr(f"c{i}", pod=f"p{i}", ns="grp", labels={"app": f"a{i}"}) for i in range(2)]
    st = run(p, *cs)
    assert st.members[cs[0].id].balloon == st.members[cs[1].id].balloon
    q = policy({**config, "balloonTypes": [{**grp, "groupBy": "${pod/labels/app}"}]})
    d = q.rebuild(reports_of(p, st, cs))
    assert [u.container_id for u in d.updates] == [cs[1].id]
    assert unexplained_moves(d) == [], d.reason
    assert f"moved: {cs[1].id}: its CPUs " in d.reason, d.reason
    assert "they are of different 'grp' groups" in d.reason, d.reason


def test_the_hidden_threads_a_member_shares_are_not_taken_for_free_ones() -> None:
    """Two-socket, ``hidden``, ``composites`` then ``levels``: c0 in ``grp[0]`` (hiding
    hyperthreads) reports 2,4-7,11, one thread of each core of 2 and the idle 4-7,
    10-15 it shares; ``duo[0]`` has 3.  The rebuild took the hidden threads 10, 12-15
    for CPUs nobody uses, made ``duo[0]`` on 10 instead of 3, and c0 then saw 2-7: a
    move of a valid placement."""
    t = load_topology("two-socket")
    c0 = bctr("c0", pod="p0", ns="grp", labels={"app": "a0"})
    p = policy(ANYWHERE["hidden"], t)
    st = run(p, c0)
    for name in ["composites", "levels"]:
        q = policy(ANYWHERE[name], t)
        st = q.rebuild(reports_of(p, st, [c0])).state
        p = q
    assert str(reports_of(p, st, [c0])[0].current_cpus) == "2,4-7,11", "pick another case"
    d = p.rebuild(reports_of(p, st, [c0]))
    assert (d.reason, d.updates, d.state) == ("rebuilt", (), st)
