"""docs/policies.md's table of their topology-aware suite counts what the ports check.

One row per test of theirs (`tests.parity.upstream.COUNTS`), its Checks cell and status
held to the ports (`tests.parity.table`: "passes" only when no port is an expected
failure and no check of theirs is left out), every test it names real.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.parity import (
    test_topology_aware_n4c16,
    test_topology_aware_n4c16_irq,
    test_topology_aware_n4c16_pools,
    test_topology_aware_n4c128,
    test_topology_aware_n6_hbm_cxl,
    test_topology_aware_s8c4k,
)
from tests.parity.table import is_xfail, row_problems, summary_problems
from tests.parity.upstream import COUNTS

DOC = Path(__file__).resolve().parents[2] / "docs" / "policies.md"
ROOT = DOC.parents[1]
POLICY = "topology-aware"

MODULES = {
    "n4c16": (
        test_topology_aware_n4c16,
        test_topology_aware_n4c16_pools,
        test_topology_aware_n4c16_irq,
    ),
    "n4c128": (test_topology_aware_n4c128,),
    "n6-hbm-cxl": (test_topology_aware_n6_hbm_cxl,),
    "s8c4k": (test_topology_aware_s8c4k,),
}

#: a named test elsewhere in our suite: `tests/<path>.py::test_name`
OTHER = re.compile(r"`(tests/[\w/]+\.py)::(test\w+)`")
#: a named test of the machine's parity modules: `test_name`
LOCAL = re.compile(r"`(test\w+)`")


def _section() -> str:
    text = DOC.read_text(encoding="utf-8")
    return text.split("### nri-plugins test suite", 1)[1].split("\n### ", 1)[0]


def _rows() -> dict[str, tuple[str, str]]:
    rows = {}
    for line in _section().splitlines():
        m = re.match(r"^\| ([\w-]+/test[\w-]+) \| (.+?) \| (.+) \|$", line)
        if m:
            rows[m.group(1)] = (m.group(2), m.group(3))
    return rows


def test_every_test_of_theirs_has_a_row() -> None:
    theirs = {t.split("/", 1)[1] for t in COUNTS if t.startswith(f"{POLICY}/")}
    assert set(_rows()) == theirs


def test_rows_count_what_the_ports_check() -> None:
    problems = []
    for test, (checks, status) in _rows().items():
        problems += row_problems(f"{POLICY}/{test}", checks, status)
    problems += summary_problems(_section(), {t: s for t, (_, s) in _rows().items()})
    assert not problems, "\n".join(problems)


def test_named_tests_exist() -> None:
    for theirs, (_, here) in _rows().items():
        modules = MODULES[theirs.split("/")[0]]
        for name in LOCAL.findall(here):
            assert any(hasattr(m, name) for m in modules), f"{theirs}: no {name} for it"
        for path, name in OTHER.findall(here):
            source = (ROOT / path).read_text(encoding="utf-8")
            assert re.search(rf"^def {name}\(", source, re.M), f"{theirs}: {name} not in {path}"


def test_a_named_expected_failure_makes_the_row_partly() -> None:
    """Beside the ports (`row_problems`): a named hypothesis test marked xfail too."""
    for theirs, (_, here) in _rows().items():
        modules = MODULES[theirs.split("/")[0]]
        xfails = [
            n for n in LOCAL.findall(here) for m in modules if is_xfail(getattr(m, n, None))
        ]
        if xfails:
            assert here.startswith("partly") and "xfail" in here, (theirs, xfails)
