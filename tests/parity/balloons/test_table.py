"""docs/policies.md's table of their balloons suite counts what the ports check.

One row per test of theirs (`tests.parity.upstream.COUNTS`), naming its file here (or
"—"), its Checks cell and status held to the ports (`tests.parity.table`).
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.parity.table import row_problems, summary_problems
from tests.parity.upstream import COUNTS

HERE = Path(__file__).resolve().parent
DOC = HERE.parents[2] / "docs" / "policies.md"
POLICY = "balloons"
ROW = re.compile(
    r"^\| ((?:n4c16|n6-hbm-cxl|s8c4k)/test\d\d-[a-z0-9-]+) \| (.*?) \| (.*?) \| (.*) \|$"
)


def _section() -> str:
    text = DOC.read_text(encoding="utf-8")
    return text.split("### nri-plugins test suite")[2].split("\n## ", 1)[0]


def rows() -> dict[str, tuple[str, str, str]]:
    return {m.group(1): (m.group(2), m.group(3), m.group(4))
            for line in _section().splitlines() if (m := ROW.match(line))}  # fmt: skip


def test_every_test_of_theirs_has_a_row_and_every_named_file_exists() -> None:
    table = rows()
    assert set(table) == {t.split("/", 1)[1] for t in COUNTS if t.startswith(f"{POLICY}/")}
    named = {cell.strip("`") for cell, _, _ in table.values() if cell != "—"}
    here = {p.name for p in HERE.glob("test_*.py")} - {"test_harness.py", "test_table.py"}
    assert named == here, (sorted(named - here), sorted(here - named))
    for test, (cell, _, status) in table.items():
        assert (cell == "—") == status.startswith("n/a"), (test, cell, status[:40])


def test_rows_count_what_the_ports_check() -> None:
    problems = []
    for test, (_, checks, status) in rows().items():
        problems += row_problems(f"{POLICY}/{test}", checks, status)
    problems += summary_problems(_section(), {t: s for t, (_, _, s) in rows().items()})
    assert not problems, "\n".join(problems)
