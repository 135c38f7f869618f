"""`explain`: the candidates and the winner of a decision, against the decision taken."""

from __future__ import annotations

from pathlib import Path

import pytest

from nri_resmgr.cli import main
from nri_resmgr.simulator.explain import explain_in_scenario
from nri_resmgr.simulator.run import quiet_log, run_scenario
from nri_resmgr.simulator.scenario import load_scenario
from nri_resmgr.view.explain import Explanation
from tests.support.requirements import REPO

SCENARIOS = REPO / "examples" / "scenarios"
TOPOLOGY_AWARE = sorted(
    p for p in SCENARIOS.glob("*.yaml") if load_scenario(p).policy in (None, "topology-aware")
)


@pytest.mark.parametrize("path", TOPOLOGY_AWARE, ids=lambda p: p.stem)
def test_the_explained_winner_is_the_pool_the_policy_chose(path: Path) -> None:
    scenario = load_scenario(path)
    result = run_scenario(scenario, log=quiet_log())
    checked = 0
    for k, step in enumerate(scenario.steps):
        if step.create is None:
            continue
        for c in step.create.containers:
            target = f"{step.create.pod}/{c.name}"
            found = explain_in_scenario(scenario, target, step=k, log=quiet_log())
            if isinstance(found, str):  # refused: the step's error is the refusal
                assert any(e == found for e in result.steps[k].errors), target
                continue
            assert isinstance(found, Explanation) and found.ranking is not None
            report = result.steps[k].containers.get(target)
            assert report is not None, target
            assert (found.pool, found.kind) == (report.pool, report.kind), target
            if found.kind in ("exclusive", "isolated"):
                assert found.cpus == report.cpus, target
            winner = found.ranking.winner
            if "fallbackToShared" not in found.reason and "reserved capacity" not in found.reason:
                assert winner is not None and winner.pool == found.pool, target
            keys = [cand.key for cand in found.ranking.candidates if cand.key is not None]
            assert keys == sorted(keys) and len(set(keys)) == len(keys), target
            for cand in found.ranking.candidates[1:]:
                assert cand.verdict.startswith(("lost on ", "no offer: ")), cand
            checked += 1
    assert checked, f"{path.name}: expected containers to explain"


def test_explain_command(capsys: pytest.CaptureFixture[str]) -> None:
    basic = str(SCENARIOS / "basic-qos.yaml")
    assert main(["explain", "db/postgres", "--scenario", basic]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "container default/db/postgres (Guaranteed)"
    (winner,) = [line for line in out if " winner" in line]
    assert winner.split()[0] == "node1" and winner.endswith("cpus 2,10")
    assert any("node0" in line and "lost on -sliceable" in line for line in out)
    assert "  decision: exclusive in node1, cpus 2,10, mems 1 (exclusive in node1)" in out


def test_explain_a_refusal(capsys: pytest.CaptureFixture[str]) -> None:
    static = str(SCENARIOS / "static-policy.yaml")
    assert main(["explain", "huge", "--scenario", static]) == 0
    out = capsys.readouterr().out
    assert out.startswith("huge: refused: huge/main: pod default/huge container main: requested 14")


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("nosuch", "explain: no step up to 3 creates pod 'nosuch'"),
        (
            "db/nosuch",
            "explain: pod 'db' has no app container 'nosuch'; expected one of ['postgres']",
        ),
    ],
)
def test_explain_names_what_is_not_there(
    target: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["explain", target, "--scenario", str(SCENARIOS / "basic-qos.yaml")]) == 2
    assert message in capsys.readouterr().err
