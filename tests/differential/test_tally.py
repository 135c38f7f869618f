"""The differential run's counts, without Go: the agreement and the strict agreement.

`profile.Tally` reports two shares per machine and policy: the agreement (identical or of
a documented class, knock-on included) and the strict one (knock-on counted as a
divergence), so a reader sees how much of the agreement rests on the knock-on rule.
"""

from __future__ import annotations

from tests.differential.gen import Case
from tests.differential.plugins import Placement
from tests.differential.profile import Tally
from tests.differential.run import KNOCK_ON, CaseResult, Observation


def _result(*classes: str | None) -> CaseResult:
    case = Case("random/1", "topology-aware", "", (), 1)
    out = CaseResult(case)
    for step, cls in enumerate(classes):
        out.observations.append(
            Observation(step, 0, "create", "default/p0/c0", Placement("1"), Placement("2"), cls)
        )
    return out


def test_strict_agreement_counts_knock_on_as_divergence() -> None:
    tally = Tally()
    tally.add(_result(None, None, "reserved-capacity", f"{KNOCK_ON}reserved-capacity", ""))
    row = tally.total("topology-aware")
    assert (row.observations, row.undocumented, row.knock_on) == (5, 1, 1)
    assert row.agreement == 0.8
    assert row.strict == 0.6
    table = tally.table()
    assert "| strict |" in table.splitlines()[0]
    assert "| 80.0% | 60.0% | 60.0% |" in table


def test_strict_equals_agreement_without_knock_on() -> None:
    tally = Tally()
    tally.add(_result(None, "restart-keeps-placements", None))
    row = tally.total("topology-aware")
    assert row.knock_on == 0
    assert row.strict == row.agreement == 1.0


def test_in_scope_counts_every_knock_on_but_a_restarts() -> None:
    """Issue 22 keeps the restart rule out of the comparison's scope: the knock-on of a
    restart does not count against the in-scope figure, every other knock-on does."""
    tally = Tally()
    tally.add(
        _result(
            None,
            "restart-keeps-placements",
            f"{KNOCK_ON}restart-keeps-placements",
            "shared-refused",
            f"{KNOCK_ON}shared-refused",
        )
    )
    row = tally.total("topology-aware")
    assert (row.knock_on, row.undocumented) == (2, 0)
    assert row.strict == 0.6
    assert row.in_scope == 0.8
    assert "| 100.0% | 60.0% | 80.0% |" in tally.table()
