"""The rules docs/policies.md's tables of their suites keep, shared by both table tests.

Each row of a table names one of their tests, the checks its ports evaluate out of the
checks their script makes (`checks_cell`: ``47/47`` expressions, ``metrics 21/21``; ``—``
when their script has none) and a status: **passes** (every check of theirs here is
evaluated and holds: no port is an expected failure, none left out), **partly** (some
port is a strict expected failure, or some checks are left out with the reason
`tests.parity.upstream.LEFT_OUT` gives, or a check of theirs that is no ``verify``
expression is not here; the row says why), **n/a** (nothing of it runs
here: no port, and the row says why).  `row_problems` lists how a row breaks them; the
summary line under a table counts the three (`summary_problems`).  Importing this module
imports every port module, so `PORTS` is complete.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from pathlib import Path

from tests.parity.ports import PORTS
from tests.parity.upstream import checked

__all__ = [
    "PORTS",
    "STATUSES",
    "checks_cell",
    "is_xfail",
    "row_problems",
    "summary_problems",
]

HERE = Path(__file__).resolve().parent
#: the modules holding the ports (they register themselves with `ports.port` on import)
PORT_MODULES = sorted(
    p
    for p in [*HERE.glob("test_topology_aware_*.py"), *HERE.glob("balloons/test_*.py")]
    if p.name not in ("test_table.py", "test_harness.py")
)
for _path in PORT_MODULES:
    importlib.import_module(".".join(_path.relative_to(HERE.parents[1]).with_suffix("").parts))

STATUSES = ("passes", "partly", "n/a")


def is_xfail(fn: Callable[..., None] | None) -> bool:
    """`fn` carries pytest's xfail mark (None: no such function, no mark)."""
    marks = fn.__dict__.get("pytestmark", []) if fn is not None else []
    return any(m.name == "xfail" for m in marks)


def checks_cell(test: str) -> str:
    """What the Checks column says for `test`."""
    ours, theirs = checked(test)
    if not theirs.expressions and not theirs.metrics:
        return "—"
    parts = []
    if theirs.expressions or not theirs.metrics:
        parts.append(f"{ours.expressions}/{theirs.expressions}")
    if theirs.metrics:
        parts.append(f"metrics {ours.metrics}/{theirs.metrics}")
    return ", ".join(parts)


def row_problems(test: str, checks: str, status: str) -> list[str]:
    """How the row of `test` (its Checks cell and status text) breaks the rules."""
    problems = []
    word = next((w for w in STATUSES if status.startswith(w)), None)
    if word is None:
        return [f"{test}: status must start with one of {STATUSES}, found {status[:30]!r}"]
    if checks != checks_cell(test):
        problems.append(f"{test}: Checks says {checks!r}, the ports check {checks_cell(test)!r}")
    ports = PORTS.get(test, [])
    xfails = [fn.__name__ for fn in ports if is_xfail(fn)]
    ours, theirs = checked(test)
    complete = not xfails and ours == theirs
    if word == "passes" and not complete:
        problems.append(
            f"{test}: says passes, but expected failures {xfails} and {theirs} checked as {ours}"
        )
    if word == "n/a" and ports:
        problems.append(f"{test}: says n/a, yet {[f.__name__ for f in ports]} port it")
    for name in xfails:
        if f"`{name}`" not in status:
            problems.append(f"{test}: {name} is an expected failure the row does not name")
    if xfails and "xfail" not in status:
        problems.append(f"{test}: has expected failures and does not say xfail")
    return problems


def summary_problems(text: str, statuses: Mapping[str, str]) -> list[str]:
    """The table's summary line counts its rows by status word."""
    counts = {w: sum(s.startswith(w) for s in statuses.values()) for w in STATUSES}
    want = (
        f"Of their {len(statuses)} tests, {counts['passes']} pass whole, "
        f"{counts['partly']} partly and {counts['n/a']} are not applicable"
    )
    return [] if want in re.sub(r"\s+", " ", text) else [f"summary line missing: {want!r}"]
