"""docs/policies.md's table of their balloons suite and the files here agree."""

from __future__ import annotations

import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
DOC = HERE.parents[2] / "docs" / "policies.md"
ROW = re.compile(r"^\| (?:n4c16|n6-hbm-cxl|s8c4k)/test\d\d-[a-z0-9-]+ \| (.*?) \| (.*) \|$")


def rows() -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for line in DOC.read_text().splitlines()
            if (m := ROW.match(line))]  # fmt: skip


def test_every_translated_test_is_in_the_table_and_every_named_file_exists() -> None:
    table = rows()
    assert len(table) == 27, len(table)  # their n4c16, n6-hbm-cxl and s8c4k tests
    named = {cell.strip("`") for cell, _ in table if cell != "—"}
    here = {p.name for p in HERE.glob("test_*.py")} - {"test_harness.py", "test_table.py"}
    assert named == here, (sorted(named - here), sorted(here - named))
    for cell, status in table:
        translated = cell != "—"
        assert translated == status.startswith(("passes", "translated", "partly")), (cell, status)


def test_passes_in_the_table_is_a_test_without_an_expected_failure() -> None:
    for cell, status in rows():
        if cell == "—":
            continue
        passes = status.startswith(("passes", "partly, passes"))
        marked = "pytest.mark.xfail" in (HERE / cell.strip("`")).read_text()
        assert passes != marked, (cell, status[:60])
