"""The decision log: one line per decision with the documented keys; consequences once."""

from __future__ import annotations

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
