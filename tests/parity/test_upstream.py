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

from collections.abc import Callable

import pytest

from tests._support import require
from tests.parity import ports, upstream
from tests.parity.machines import N4C16
from tests.parity.ports import Tally
from tests.parity.suite import Suite
from tests.parity.table import PORTS, is_xfail
from tests.parity.upstream import COUNTS, LEFT_OUT, Counts


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


CHECKED = sorted(t for t, c in COUNTS.items() if c != Counts(0, 0) or t in PORTS)


@pytest.mark.parametrize("test", CHECKED)
def test_each_port_runs_exactly_their_checks(test: str) -> None:
    ours, theirs = upstream.checked(test)
    fns = PORTS.get(test, [])
    assert fns or ours == Counts(0, 0), f"{test}: {theirs} of their checks, no port registered"
    calls = exprs = metrics = 0
    for fn in fns:
        t = _run(fn)
        calls += t.calls
        exprs += len(t.evaluated)
        metrics += len(t.metrics)
        if is_xfail(fn):
            assert t.failed, f"{test}: {fn.__name__} is marked xfail and nothing fails"
        else:
            assert not t.failed, f"{test}: {fn.__name__}: {t.failed}"
    assert Counts(calls, exprs, metrics) == ours, (
        f"{test}: ports ran (calls, expressions, metrics); their script minus LEFT_OUT"
    )


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
