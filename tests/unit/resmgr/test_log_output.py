"""What `configure_logging` writes: JSON lines as `json.dumps` renders them, each
configuration to its own output (the renderer's encoder and the printer are made once per
configuration, `nri_resmgr.ops.logs`)."""

from __future__ import annotations

import io
import json
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import pytest
import structlog
import structlog.testing

from nri_resmgr.ops.log_config import LogConfig, LogFormat
from nri_resmgr.ops.logs import _JSONDumps, configure_logging, get_logger


@pytest.fixture(autouse=True)
def _reset_structlog() -> object:
    yield None
    structlog.reset_defaults()


def test_a_json_line_is_rendered_as_json_dumps_renders_it() -> None:
    out = io.StringIO()
    configure_logging(LogConfig(format=LogFormat.JSON), stream=out)
    log = get_logger("pipeline")
    log.info("create", cpus="0-3", count=2, rdt=None, where=Path("/x"), nested={"a": [1]})
    log.info("create", cpus="4-7", count=3, rdt="gold", where=Path("/y"), nested={})
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    for line in lines:
        # json.dumps' separators and key order: the line is its own canonical form
        assert line == json.dumps(json.loads(line))
    first, second = (json.loads(line) for line in lines)
    assert first["where"] == repr(Path("/x"))  # structlog's fallback for what JSON lacks
    assert second["where"] == repr(Path("/y"))
    assert (first["count"], first["rdt"], first["nested"]) == (2, None, {"a": [1]})
    assert (second["count"], second["rdt"], second["nested"]) == (3, "gold", {})


def test_each_configuration_writes_to_its_own_output() -> None:
    log = get_logger("daemon")  # made before either configuration: follows both
    one, two = io.StringIO(), io.StringIO()
    configure_logging(LogConfig(format=LogFormat.JSON), stream=one)
    log.info("first")
    configure_logging(LogConfig(format=LogFormat.JSON), stream=two)
    log.info("second")
    assert [json.loads(line)["event"] for line in one.getvalue().splitlines()] == ["first"]
    assert [json.loads(line)["event"] for line in two.getvalue().splitlines()] == ["second"]


def test_the_encoder_follows_the_keywords_it_is_given() -> None:
    dumps = _JSONDumps()
    obj = {"b": Path("/p"), "a": 1}
    assert dumps(obj, default=repr) == json.dumps(obj, default=repr)
    assert dumps(obj, default=str, sort_keys=True) == json.dumps(obj, default=str, sort_keys=True)
    with pytest.raises(TypeError):
        dumps(obj)  # no default: a Path is not JSON, as for json.dumps


def _mark(
    _logger: object, _method: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    event["marked"] = True
    return event


def test_a_logger_follows_a_new_processor_chain_on_the_same_output() -> None:
    out = io.StringIO()
    configure_logging(LogConfig(format=LogFormat.JSON), stream=out)
    log = get_logger("pipeline")
    log.info("before")
    structlog.configure(processors=[_mark, structlog.processors.JSONRenderer()])
    log.info("after")
    before, after = (json.loads(line) for line in out.getvalue().splitlines())
    assert "marked" not in before and before["level"] == "info"
    assert after["marked"] is True and "level" not in after  # the new chain, no level


def test_a_capture_sees_the_lines_of_a_logger_used_before() -> None:
    configure_logging(LogConfig(format=LogFormat.JSON), stream=io.StringIO())
    log = get_logger("pipeline")
    log.info("before")
    with structlog.testing.capture_logs() as captured:
        log.info("during", cpus="0-3")
    assert [(c["event"], c["cpus"]) for c in captured] == [("during", "0-3")]


def test_a_logger_follows_a_new_output_under_the_same_chain() -> None:
    one, two = io.StringIO(), io.StringIO()
    configure_logging(LogConfig(format=LogFormat.JSON), stream=one)
    log = get_logger("pipeline")
    log.info("first")
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(file=two))
    log.info("second")
    assert [json.loads(line)["event"] for line in one.getvalue().splitlines()] == ["first"]
    assert [json.loads(line)["event"] for line in two.getvalue().splitlines()] == ["second"]
