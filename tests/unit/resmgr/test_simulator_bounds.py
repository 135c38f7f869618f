"""The simulator's bounds: scenario files too large, too many steps, containers, restarts
or rows, huge quantities and hostile files end in a `ScenarioError` naming the bound.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nri_resmgr.cli import main
from nri_resmgr.simulator.run import run_scenario
from nri_resmgr.simulator.scenario import (
    ScenarioError,
    load_scenario,
)
from tests.support.logs import QUIET
from tests.support.simulator import scenario


def _pods(count: int, containers: int = 1) -> list[dict[str, Any]]:
    return [
        {
            "create": {
                "pod": f"p{i}",
                "containers": [
                    {"name": f"c{j}", "requests": {"cpu": "10m"}} for j in range(containers)
                ],
            }
        }
        for i in range(count)
    ]


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        pytest.param(
            [{"restart": {}}] * 1001,
            "steps: expected at most 1000 steps, found 1001",
            id="10001-steps",
        ),
        pytest.param(
            _pods(33, 8),
            "expected at most 256 containers created over the scenario, found 264",
            id="too-many-containers",
        ),
        pytest.param(
            _pods(1) + [{"restart": {}}] * 101,
            "expected at most 100 restart steps, found 101",
            id="too-many-restarts",
        ),
        pytest.param(
            _pods(100, 2) + [{"restart": {}}] * 60,
            "expected at most 10000 container rows",
            id="too-many-rows",
        ),
    ],
)
def test_scenario_bounds(steps: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        load_scenario(scenario(steps))


@pytest.mark.parametrize(
    ("resources", "message"),
    [
        pytest.param(
            {"requests": {"cpu": "9" * 400}},
            "requests.cpu: expected a CPU quantity",
            id="cpu-400-digits",
        ),
        pytest.param(
            {"requests": {"cpu": "99999999999"}},
            "requests.cpu: expected at most 8192 CPUs",
            id="cpu-huge",
        ),
        pytest.param(
            {"limits": {"memory": "9" * 5000}},
            "limits.memory: expected a memory quantity",
            id="memory-5000-digits",
        ),
        pytest.param(
            {"limits": {"memory": "99999999999Ei"}},
            "limits.memory: expected at most 9223372036854775807 bytes",
            id="memory-huge",
        ),
    ],
)
def test_huge_quantities_are_scenario_errors(resources: dict[str, Any], message: str) -> None:
    sc = load_scenario(
        scenario([{"create": {"pod": "a", "containers": [{"name": "c", **resources}]}}])
    )
    with pytest.raises(ScenarioError, match=message):
        run_scenario(sc, log=QUIET)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            '{"steps": ' + "[" * 5000 + "]" * 5000 + "}",
            "expected nesting at most 64 levels deep",
            id="deep-json",
        ),
        pytest.param(
            "steps:\n" + "".join("  " * i + "- \n" for i in range(1, 100)),
            "expected nesting at most 64 levels deep",
            id="deep-yaml",
        ),
        pytest.param(
            '{"steps": [{"create": {"pod": "a", "containers": [{"name": "c", '
            '"requests": {"cpu": 1e999}}]}}]}',
            "expected a finite number, found inf",
            id="inf-json",
        ),
    ],
)
def test_hostile_scenario_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    path = tmp_path / "s.json"
    path.write_text(text)
    assert main(["simulate", "--scenario", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_topology_name_too_long_for_a_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by tests/fuzz/test_config_fuzz.py: the scenario-relative lookup raised OSError."""
    path = tmp_path / "s.json"
    path.write_text(json.dumps(scenario([], topology="exclude-cpuset:" + "0," * 3000 + "1")))
    assert main(["simulate", "--scenario", str(path)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("nri-resmgr simulate: topology source 'exclude-cpuset:0,0,")
