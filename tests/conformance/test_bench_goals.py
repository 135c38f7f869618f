"""`python -m bench.goals` end to end, at tiny sample sizes (and 1,500 containers for
the larger node of the growth rows): every row of issues 17 and 25 is measured and
judged, and the JSON says the same (the numbers themselves are not checked: this is a
run on a shared machine, not a benchmark)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.goals import GOALS
from tests.conformance.harness_build import build_harness
from tests.support.requirements import REPO, require_go

pytestmark = pytest.mark.conformance


def test_goals_measures_and_judges_every_row(tmp_path: Path) -> None:
    require_go()  # the Go no-op peer is built on first use
    build_harness("v0.12.2")
    out = tmp_path / "goals.json"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.goals",
            "--requests",
            "40",
            "--samples",
            "6",
            "--reps",
            "1",
            "--big",
            "1500",
            "--out",
            str(out),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    for goal in GOALS:
        [row] = [line for line in lines if line.split()[:1] == [goal.key]]
        assert row.endswith(" ok") or "short (" in row, row
    assert any(line.startswith("goals: ") and f" of {len(GOALS)} ok" in line for line in lines)
    result = json.loads(out.read_text())
    assert list(result["rows"]) == [g.key for g in GOALS]
    for key, row in result["rows"].items():
        assert row["value"] > 0, (key, row)
        assert row["ok"] == (row["factor"] <= 1), (key, row)
    assert result["rows"]["noop-rtt"]["peer"] > 0
    assert result["details"]["restart-1000"]["first_sync_updates"] == 1000
