"""Balloons in the simulator output, the NodeResourceTopology report and the metrics."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from nri_resmgr.kube.report import PoolReporter
from nri_resmgr.ops.metrics import Metrics, StateSnapshot, balloon_snapshots
from nri_resmgr.policy.static import StaticPolicy
from nri_resmgr.simulator.results import render_json, render_table
from nri_resmgr.simulator.run import run_scenario
from nri_resmgr.simulator.scenario import load_scenario
from tests.support.balloons import bctr, machine, policy, run

SCENARIO = """
topology: two-socket
policy: balloons
config:
  reservedResources: {cpu: 750m}
  balloonTypes:
    - name: inference
      namespaces: [ml]
      minCPUs: 2
      maxCPUs: 8
steps:
  - create:
      pod: inf-0
      namespace: ml
      containers:
        - name: server
          requests: {cpu: "3"}
  - create:
      pod: inf-1
      namespace: ml
      containers:
        - name: server
          requests: {cpu: "2"}
  - delete: {pod: inf-0}
"""


def _simulate(tmp_path: Path) -> object:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    return run_scenario(load_scenario(path))


def test_json_has_a_balloons_section_per_step(tmp_path: Path) -> None:
    doc = json.loads(render_json(_simulate(tmp_path)))  # type: ignore[arg-type]
    sizes = []
    for step in doc["steps"]:
        (inf,) = [b for b in step["balloons"] if b["type"] == "inference"]
        sizes.append((len(inf["containers"]), inf["cpus"]))
        assert [b["name"] for b in step["balloons"]][:2] == ["reserved[0]", "inference[0]"]
    # inflates from 3 CPUs to 5, and deflates to 2 when the first replica goes
    counts = [n for n, _ in sizes]
    assert counts == [1, 2, 1]
    cpus = [len(_parse(c)) for _, c in sizes]
    assert cpus == [3, 5, 2]


def _parse(text: str) -> set[int]:
    out: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out |= set(range(int(lo), int(hi or lo) + 1))
    return out


def test_table_shows_the_balloons(tmp_path: Path) -> None:
    text = render_table(_simulate(tmp_path))  # type: ignore[arg-type]
    assert "  balloon       type       cpus" in text
    assert "inference[0]  inference" in text


def test_policies_without_balloons_report_none(tmp_path: Path) -> None:
    static = StaticPolicy(topology=machine(), config={})
    assert balloon_snapshots(static, static.initial_state()) == ()


def _snapshot(show: bool) -> StateSnapshot:
    p = policy(
        {
            "showContainersInNrt": show,
            "balloonTypes": [{"name": "b", "namespaces": ["*"], "minCPUs": 2}],
        }
    )
    st = run(p, bctr("a", pod="p1", milli=1000), bctr("c", pod="p2", milli=3000))
    return StateSnapshot(balloons=balloon_snapshots(p, st))


def test_metrics_gauges_per_type() -> None:
    m = Metrics()
    m.observe_state(_snapshot(False))
    samples = {
        (s.name, s.labels.get("type")): s.value
        for fam in text_string_to_metric_families(m.exposition().decode())
        for s in fam.samples
        if s.name.startswith("nri_resmgr_balloon")
    }
    assert samples[("nri_resmgr_balloons", "b")] == 1
    assert samples[("nri_resmgr_balloon_cpus", "b")] == 4
    assert samples[("nri_resmgr_balloon_containers", "b")] == 2
    assert samples[("nri_resmgr_balloons", "reserved")] == 1


def _same(snap: StateSnapshot) -> StateSnapshot:
    return snap


def test_nrt_lists_balloons_and_containers_when_asked() -> None:
    for show in (False, True):
        snap = _snapshot(show)
        zones = PoolReporter(partial(_same, snap), "balloons").report()["zones"]
        balloons = [z for z in zones if z["type"] == "balloon"]
        assert [z["name"] for z in balloons] == ["reserved[0]", "b[0]", "default[0]"]
        b0 = balloons[1]
        assert b0["resources"][0]["capacity"] == "4"
        owned = [z for z in zones if z["type"] == "allocation for container"]
        assert [(z["name"], z["parent"]) for z in owned] == (
            [("p1-a", "b[0]"), ("p2-c", "b[0]")] if show else []
        )
