"""Issue 24: with the placement records lost, the balloons rebuild keeps every valid
placement, or moves it with a stated cause (`restart_rule.unexplained_moves`).

Each case is an example the restart property (test_restart.py) found moving a container
whose placement was valid with no cause in the rebuild's reason, shrunk to the steps
that show it.
"""

from __future__ import annotations

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
