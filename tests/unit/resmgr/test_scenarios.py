"""Every worked scenario in examples/scenarios/ produces the result its comments document.

Each scenario states its expected result in comment lines of this form (steps count from
0; "mems" followed by nothing means no memory pinning):

    # expect step N: POD/CONTAINER KIND CPUS mems MEMS
    # expect step N: updated POD/CONTAINER CPUS      (an update was sent in that step)
    # expect step N: absent POD/CONTAINER             (not live after that step)
    # expect step N: rdt POD/CONTAINER CLASS          ("-" for no class)
    # expect step N: error TEXT                      (a step error contains TEXT)
    # expect step N: size POD/CONTAINER COUNT         (it may run on COUNT CPUs)
    # expect step N: same POD/A POD/B                 (the two run on the same CPUs)
    # expect step N: apart POD/A POD/B                (the two share no CPU)

The last three say what a balloons scenario guarantees whichever CPUs the allocator picks.

A step without an ``error`` expectation must have no errors at all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from nri_resmgr.simulator.results import SimulationResult, StepResult
from nri_resmgr.simulator.run import run_scenario
from nri_resmgr.simulator.scenario import load_scenario
from nri_resmgr.topology.cpuset import IDSet
from tests.support.logs import QUIET

SCENARIOS = Path(__file__).resolve().parents[3] / "examples" / "scenarios"
FILES = sorted(SCENARIOS.glob("*.yaml"))
EXPECT = re.compile(r"^#\s*expect step (\d+):\s*(.*?)\s*$")


@dataclass(frozen=True)
class Expectation:
    step: int
    text: str


def expectations(path: Path) -> list[Expectation]:
    out = []
    for line in path.read_text().splitlines():
        m = EXPECT.match(line)
        if m:
            out.append(Expectation(int(m.group(1)), m.group(2)))
    return out


def test_there_are_worked_scenarios() -> None:
    names = {p.stem for p in FILES}
    assert {
        "basic-qos",
        "shrinking-shared-pool",
        "init-containers",
        "kube-system-reserved",
        "overcommit",
        "memory-types-pmem",
        "static-policy",
        "restart",
        "rdt-classes",
        "balloons-inference",
    } <= names


def _cpus(step: StepResult, exp: Expectation, key: str) -> IDSet:
    report = step.containers.get(key)
    assert report is not None, (exp, list(step.containers))
    return IDSet.parse(report.cpus)


def check(result: SimulationResult, exp: Expectation) -> None:
    step = result.steps[exp.step]
    words = exp.text.split()
    if words[0] == "size":
        assert len(_cpus(step, exp, words[1])) == int(words[2]), (exp, _cpus(step, exp, words[1]))
    elif words[0] == "same":
        assert _cpus(step, exp, words[1]) == _cpus(step, exp, words[2]), exp
    elif words[0] == "apart":
        assert _cpus(step, exp, words[1]).isdisjoint(_cpus(step, exp, words[2])), exp
    elif words[0] == "error":
        text = exp.text[len("error") :].strip()
        assert any(text in e for e in step.errors), (exp, step.errors)
    elif words[0] == "updated":
        assert step.updates.get(words[1]) == words[2], (exp, dict(step.updates))
    elif words[0] == "absent":
        assert words[1] not in step.containers, (exp, list(step.containers))
    elif words[0] == "rdt":
        got = step.containers[words[1]].rdt_class
        assert (got or "-") == words[2], (exp, got)
    else:
        key, kind, cpus, mems_word = words[:4]
        assert mems_word == "mems", exp
        mems = words[4] if len(words) > 4 else ""
        report = step.containers.get(key)
        assert report is not None, (exp, list(step.containers))
        assert (report.kind, report.cpus, report.mems) == (kind, cpus, mems), exp


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_scenario_matches_its_documented_result(path: Path) -> None:
    exps = expectations(path)
    assert exps, f"{path.name}: expected '# expect step N: ...' lines, found none"
    result = run_scenario(load_scenario(path), log=QUIET)
    assert max(e.step for e in exps) < len(result.steps)
    for exp in exps:
        check(result, exp)
    erring = {e.step for e in exps if e.text.startswith("error")}
    for step in result.steps:
        if step.step not in erring:
            assert step.errors == (), (path.name, step.step, step.errors)


def test_checker_can_fail() -> None:
    path = SCENARIOS / "basic-qos.yaml"
    result = run_scenario(load_scenario(path), log=QUIET)
    with pytest.raises(AssertionError):
        check(result, Expectation(0, "db/postgres exclusive 3,11 mems 1"))
    with pytest.raises(AssertionError):
        check(result, Expectation(0, "absent db/postgres"))
    # basic-qos step 2: db/postgres is exclusive on 2 CPUs, web/nginx shares 4 others
    check(result, Expectation(2, "size db/postgres 2"))
    with pytest.raises(AssertionError):
        check(result, Expectation(2, "size db/postgres 3"))
    with pytest.raises(AssertionError):
        check(result, Expectation(2, "same db/postgres web/nginx"))
    check(result, Expectation(2, "apart db/postgres web/nginx"))
    check(result, Expectation(2, "same db/postgres db/postgres"))
    with pytest.raises(AssertionError):
        check(result, Expectation(2, "apart db/postgres db/postgres"))
