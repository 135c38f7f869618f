"""The decision log: one line per decision with the documented keys; consequences once;
a rebuild's lines, put off until the reply (`defer`), are the same lines in the same
order: any other line, and the pipeline's close or replacement, writes them first."""

from __future__ import annotations

import io
import json
from collections.abc import Callable

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


def _synchronized(later: list[Callable[[], None]] | None) -> tuple[Pipeline, CapturedLog]:
    """A pipeline (its rebuild's lines put off into `later` when given) after a
    Synchronize of three containers."""
    captured = CapturedLog()
    p = Pipeline(
        CountingPolicy(), log=captured.log, defer_lines=later.append if later is not None else None
    )
    pods = [sandbox(f"p{i}") for i in range(3)]
    p.synchronize(pods, [container(pod, "c") for pod in pods])
    return p, captured


def test_a_rebuilds_lines_put_off_are_written_once_at_the_turns_end_and_say_the_same() -> None:
    _, now = _synchronized(None)
    later: list[Callable[[], None]] = []
    _, put_off = _synchronized(later)
    assert [line["event"] for line in put_off.lines] == ["rebuilt"], "only the summary yet"
    assert len(later) == 1
    later.pop()()
    assert put_off.lines == now.lines
    assert [line["event"] for line in now.lines] == ["rebuilt", *["synchronize"] * 3]


def test_a_decisions_line_put_off_is_queued_behind_the_rebuilds_and_says_the_same() -> None:
    """issue 25 (create-1000): with `defer`, every line waits for the reply, in the
    order made (the container's create after its Synchronize), written by one flush."""
    later: list[Callable[[], None]] = []
    logs = []
    for put_off in (later, None):
        p, captured = _synchronized(put_off)
        s = sandbox("p9")
        p.create(s, container(s, "c"))
        p.stop(s, container(s, "c"))
        logs.append(captured)
    assert [line["event"] for line in logs[0].lines] == ["rebuilt"], "nothing before the reply"
    assert len(later) == 1, "one write put off for every line queued"
    later.pop()()
    assert [line["event"] for line in logs[0].lines] == [
        "rebuilt",
        *["synchronize"] * 3,
        "create",
        "stop",
    ]
    assert logs[0].lines == logs[1].lines, "the same lines, written later"


def test_consequences_put_off_name_the_moved_containers_as_they_were() -> None:
    """The "updates" line and the per-update detail wait with the decision's line; the
    moved containers are named when queued (a container gone by the flush keeps its name)."""
    captured = CapturedLog()
    later: list[Callable[[], None]] = []
    p = Pipeline(
        EmptyClassPolicy(), select_classes=gold_slow, log=captured.log, defer_lines=later.append
    )
    s = sandbox()
    p.create(s, container(s, "a"))
    p.create(s, container(s, "b"))
    p.remove(s, container(s, "a"))
    assert captured.lines == [] and len(later) == 1
    later.pop()()
    assert [line["event"] for line in captured.lines] == [
        "create",
        "create",
        "updates",
        "update",
        "remove",
    ]
    assert captured.events("update")[0]["container"] == "ns/p0/a"


def test_a_pipeline_flushed_before_its_replacement_writes_the_queued_lines() -> None:
    later: list[Callable[[], None]] = []
    p, captured = _synchronized(later)
    p.flush_records()
    assert [line["event"] for line in captured.lines] == ["rebuilt", *["synchronize"] * 3]


def test_a_defer_that_runs_at_once_writes_every_line_at_once() -> None:
    """The daemon's `defer` runs the flush at once outside a running loop (a configuration
    adopted at start-up, before the loop serves): the line queued with it is written then,
    and every later line is still put off and written, not stranded until the close (the
    Kubernetes side adopts the cluster's configuration that way: found on the real node)."""
    captured = CapturedLog()
    later: list[Callable[[], None]] = []
    on_loop = False

    def defer(flush: Callable[[], None]) -> None:
        if on_loop:
            later.append(flush)
        else:
            flush()

    p = Pipeline(EmptyClassPolicy(), select_classes=gold_slow, log=captured.log, defer_lines=defer)
    s = sandbox()
    p.create(s, container(s, "a"))
    assert [line["event"] for line in captured.lines] == ["create"]
    on_loop = True
    p.create(s, container(s, "b"))
    assert len(later) == 1, "the next line's flush is put off"
    later.pop()()
    assert [line["event"] for line in captured.lines] == ["create", "create", "updates", "update"]
