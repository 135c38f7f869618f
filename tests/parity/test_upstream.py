"""Each port evaluates every check of their script: the counts in `tests.parity.upstream`.

Their script's ``verify`` calls and expressions (and metric checks) are counted in
`upstream.COUNTS` (checked against their ``code.var.sh`` when their module is in the Go
module cache).  Every port registered for a test (`tests.parity.ports.port`) is run with
a counting tally: together they make exactly that many calls and evaluate exactly that
many expressions, minus the ones `upstream.LEFT_OUT` names with the reason.  A port's false
expressions are recorded, not raised, so a port marked as an expected failure is counted
whole too, and a port has false expressions exactly when it is marked so.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable

import pytest

from tests.parity import ports, upstream
from tests.parity.machines import N4C16
from tests.parity.ports import Differs, Tally, check_metrics
from tests.parity.suite import Suite
from tests.parity.table import PORTS, is_xfail
from tests.parity.upstream import COUNTS, LEFT_OUT, Counts
from tests.support.requirements import require


def test_the_table_is_their_suite() -> None:
    root = upstream.suite_dir()
    require(root.is_dir(), f"nri-plugins {upstream.TAG} is not in the Go module cache ({root})")
    found = {str(p.parent.relative_to(root)) for p in root.glob("*/*/test*/code.var.sh")}
    assert set(COUNTS) == found
    for test, recorded in COUNTS.items():
        text = (root / test / "code.var.sh").read_text(encoding="utf-8")
        assert upstream.count(text) == recorded, test


def test_the_scanner_reads_bash_as_bash_does() -> None:
    script = (
        "# verify 'commented'\n"
        "CPU=1 create guaranteed\n"
        "verify 'a' \\\n    'b'\n"
        'echo "verify not a check"\n'
        "( verify \"c['${pod}']\" ) || error\n"
        "verify 'multi\nline'; verify-metrics-has-line 'x\\[0\\]'\n"
        "verify-cstates 1 2\n"
        "if true; then verify 'd'; fi\n"
    )
    found = upstream.scan(script)
    assert [(cmd, args) for _, cmd, args in found] == [
        ("verify", ["a", "b"]),
        ("verify", ["c['${pod}']"]),
        ("verify", ["multi\nline"]),
        ("verify-metrics-has-line", ["x\\[0\\]"]),
        ("verify", ["d"]),
    ]
    assert upstream.count(script) == Counts(4, 5, 1)


def _run(fn: Callable[[], None]) -> Tally:
    with ports.tally() as t:
        try:
            fn()
        except Exception as e:  # an xfail port may stop early; what it ran is counted
            t.failed.append(f"{fn.__name__} raised {type(e).__name__}: {e}")
    return t


@functools.cache
def _tallies(test: str) -> tuple[tuple[Callable[[], None], Tally], ...]:
    """Each port of `test` with what it ran (once per session: both tests below read it)."""
    return tuple((fn, _run(fn)) for fn in PORTS.get(test, []))


CHECKED = sorted(t for t, c in COUNTS.items() if c != Counts(0, 0) or t in PORTS)


@pytest.mark.parametrize("test", CHECKED)
def test_each_port_runs_exactly_their_checks(test: str) -> None:
    ours, theirs = upstream.checked(test)
    runs = _tallies(test)
    assert runs or ours == Counts(0, 0), f"{test}: {theirs} of their checks, no port registered"
    for fn, t in runs:
        if is_xfail(fn):
            assert t.failed, f"{test}: {fn.__name__} is marked xfail and nothing fails"
        else:
            assert not t.failed, f"{test}: {fn.__name__}: {t.failed}"
    ran = Counts(
        sum(t.calls for _, t in runs),
        sum(len(t.evaluated) for _, t in runs),
        sum(len(t.metrics) for _, t in runs),
    )
    assert ran == ours, (
        f"{test}: ports ran (calls, expressions, metrics); their script minus LEFT_OUT"
    )


@pytest.mark.parametrize("test", CHECKED)
def test_ports_carry_their_expressions_as_written(test: str) -> None:
    """Every expression (and metric regex) a port evaluates is one of their script's,
    character for character, as often as theirs has it (a loop of theirs, `RUNS`, may
    evaluate one more often; `LEFT_OUT` ones are missing)."""
    root = upstream.suite_dir()
    require(root.is_dir(), f"nri-plugins {upstream.TAG} is not in the Go module cache ({root})")
    found = upstream.scan((root / test / "code.var.sh").read_text(encoding="utf-8"))
    theirs = Counter(a for _, cmd, args in found if cmd == "verify" for a in args)
    theirs_metrics = Counter(a for _, cmd, args in found if cmd != "verify" for a in args)
    runs = _tallies(test)
    ours = Counter(e for _, t in runs for e in t.evaluated)
    ours_metrics = Counter(e for _, t in runs for e in t.metrics)
    assert set(ours) <= set(theirs), f"{test}: not theirs as written: {set(ours) - set(theirs)}"
    assert set(ours_metrics) <= set(theirs_metrics), set(ours_metrics) - set(theirs_metrics)
    if test not in upstream.RUNS:
        assert ours <= theirs and ours_metrics <= theirs_metrics, (ours - theirs)
    if test not in upstream.RUNS and test not in LEFT_OUT:
        assert (ours, ours_metrics) == (theirs, theirs_metrics), (theirs - ours)


def test_left_out_names_a_reason_and_a_real_test() -> None:
    for test, (counts, why) in LEFT_OUT.items():
        assert test in COUNTS and why, test
        assert counts.expressions <= COUNTS[test].expressions, test
        assert counts.metrics <= COUNTS[test].metrics, test


def test_a_false_expression_fails_naming_it_and_the_sets() -> None:
    s = Suite(N4C16, {"reservedResources": {"cpu": "750m"}})
    s.create("guaranteed", CPU="2")
    with pytest.raises(AssertionError, match=r'(?s)len\(cpus\["pod0c0"\]\) == 3.*pod0c0: cpus'):
        s.verify('len(cpus["pod0c0"]) == 2', 'len(cpus["pod0c0"]) == 3')
    with ports.tally() as t:
        s.verify('len(cpus["pod0c0"]) == 3', "cpus['${pod}c0'] == set()", shell={"pod": "pod9"})
    assert t.calls == 1 and len(t.evaluated) == 2 and len(t.failed) == 2
    assert "KeyError: 'pod9c0'" in t.failed[1]


def test_a_difference_by_design_is_checked_both_ways() -> None:
    s = Suite(N4C16, {"reservedResources": {"cpu": "750m"}})
    s.create("guaranteed", CPU="2")
    theirs_false = Differs('len(cpus["pod0c0"]) == 3', ours='len(cpus["pod0c0"]) == 2', reason="r")
    with ports.tally() as t:
        s.verify(theirs_false)
    assert t.evaluated == ['len(cpus["pod0c0"]) == 3'] and t.failed == []
    theirs_true = Differs('len(cpus["pod0c0"]) == 2', ours="True", reason="gone")
    ours_false = Differs('len(cpus["pod0c0"]) == 3', ours="False", reason="r")
    with ports.tally() as t:
        s.verify(theirs_true, ours_false)
    assert len(t.failed) == 2 and "holds now" in t.failed[0] and "ours 'False'" in t.failed[1]


def test_metric_checks_grep_the_lines_and_are_counted_apart() -> None:
    lines = ['nri_policy_balloons_cores{balloon="b[0]",cpus="1"} 1']
    with ports.tally() as t:
        check_metrics(lines, has=[r'balloon="b\[0\]"', r'balloon="b\[1\]"'])
        check_metrics(lines, has_no=[r'cpus="1"'])
    assert t.evaluated == [] and len(t.metrics) == 3
    assert len(t.failed) == 2
    assert "no metrics line matches" in t.failed[0] and "expected none" in t.failed[1]
