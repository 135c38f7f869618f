"""The decision log: one line per decision with the documented keys; consequences once."""

from __future__ import annotations

import io
import json

import structlog

from nri_resmgr.config import LogConfig, LogFormat
from nri_resmgr.ops.logs import configure_logging, enabled_for
from nri_resmgr.runtime.pipeline import Pipeline
from tests.support.logs import CapturedLog
from tests.support.pipeline import CountingPolicy, EmptyClassPolicy, container, gold_slow, sandbox


def test_decision_log_line_has_the_documented_keys() -> None:
    captured = CapturedLog()
    p = Pipeline(CountingPolicy(), log=captured.log)
    s = sandbox()
    p.create(s, container(s, "a"))
    (line,) = captured.lines
    for key in ("container", "cpus", "mems", "kind", "pool", "rdt", "blockio", "reason"):
        assert key in line
    assert line["container"] == "ns/p0/a" and line["cpus"] == "0" and line["reason"] == "counted"


def test_consequences_are_logged_once_per_moved_container() -> None:
    captured = CapturedLog()
    p = Pipeline(EmptyClassPolicy(), select_classes=gold_slow, log=captured.log)
    s = sandbox()
    p.create(s, container(s, "a"))
    p.create(s, container(s, "b"))
    update = captured.events("update")
    assert [(u["container"], u["id"], u["rdt"]) for u in update] == [("ns/p0/a", "p0-a", "gold")]
    assert update[0]["reason"] == "consequence of pod ns/p0 container b: counted"
    # issue 17: the per-update detail is at debug; info has one line per decision
    assert [u["method"] for u in update] == ["debug"]
    summary = captured.events("updates")
    assert [(u["method"], u["count"]) for u in summary] == [("info", 1)]


def _pipeline_lines(config: LogConfig) -> tuple[list[dict[str, object]], bool]:
    """The lines the pipeline's own log (no log handed in) writes for two creations whose
    second moves the first, under `config`; and whether its debug lines are enabled."""
    out = io.StringIO()
    configure_logging(config, stream=out)
    try:
        p = Pipeline(EmptyClassPolicy(), select_classes=gold_slow)
        s = sandbox()
        p.create(s, container(s, "a"))
        p.create(s, container(s, "b"))
        debug = enabled_for("debug", "pipeline")
    finally:
        structlog.reset_defaults()
    return [json.loads(line) for line in out.getvalue().splitlines()], debug


def test_per_update_lines_follow_the_pipeline_components_level() -> None:
    """issue 25: at info the per-update detail is not even built (`ops.logs.enabled_for`);
    with the pipeline at debug it is written, one line per moved container."""
    quiet, debug = _pipeline_lines(LogConfig(level="info", format=LogFormat.JSON))
    assert [e["event"] for e in quiet] == ["create", "create", "updates"]
    assert not debug
    assert enabled_for("debug", "pipeline")  # no level filter installed: every line
    loud, debug = _pipeline_lines(
        LogConfig(level="info", format=LogFormat.JSON, debug=("pipeline",))
    )
    assert debug
    assert [e["event"] for e in loud] == ["create", "create", "updates", "update"]
    assert loud[-1]["container"] == "ns/p0/a" and loud[-1]["level"] == "debug"
