"""The daemon's root configuration: defaults, YAML and JSON, errors naming the path."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import structlog

from nri_resmgr.config import Config, LogConfig, LogFormat, config_from_mapping, load_config
from nri_resmgr.model import ConfigError
from nri_resmgr.ops.logs import configure_logging, get_logger


def test_defaults() -> None:
    c = load_config("")
    assert c == Config()
    assert c.policy == "topology-aware"
    assert c.policy_config == {}
    assert c.log.format is LogFormat.AUTO and c.log.level == "info"
    assert c.instrumentation.http_endpoint == ""


def test_yaml_document_with_camel_case_keys() -> None:
    c = load_config(
        "policy: static\n"
        "policyConfig: {reservedSystemCPUs: '0-1'}\n"
        "policyDirs: [/etc/nri-resmgr/plugins.d]\n"
        "log: {level: WARN, format: json, file: /var/log/r.log, debug: [pipeline]}\n"
        "instrumentation: {httpEndpoint: ':8891'}\n"
    )
    assert c.policy == "static"
    assert c.policy_config == {"reservedSystemCPUs": "0-1"}
    assert c.policy_dirs == ("/etc/nri-resmgr/plugins.d",)
    assert c.log == LogConfig(
        level="warning", format=LogFormat.JSON, file="/var/log/r.log", debug=("pipeline",)
    )
    assert c.instrumentation.http_endpoint == ":8891"


def test_json_file(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"policy": "none", "control": {"rdt": {"enable": True}}}))
    c = load_config(path)
    assert c.policy == "none" and c.control.rdt.enable and not c.control.blockio.enable


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("log: {format: xml}", "<config>: log.format: "),
        ("log: {level: loud}", "log.level: expected one of debug, info, warning"),
        ("polciy: static", "(document): unknown key polciy; expected one of policy, "),
        ("policyConfig: 3", "policyConfig: "),
        ("policy: ''", "policy: expected a policy name, found an empty string"),
        ("[1, 2]", "expected a mapping at the top of the document, found list"),
        ("a: [", "expected YAML or JSON, found an error"),
        ("log: {debug: [1]}", "log.debug[0]: "),
    ],
)
def test_errors_name_the_path(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(text)
    assert message in str(err.value)


def test_missing_file_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.yaml: cannot open"):
        load_config(tmp_path / "nope.yaml")


def test_mapping_source_is_named() -> None:
    with pytest.raises(ConfigError, match=r"^scenario: log\.file: "):
        config_from_mapping({"log": {"file": ["x"]}}, source="scenario")


def _emit(config: LogConfig) -> list[str]:
    out = io.StringIO()
    configure_logging(config, stream=out)
    try:
        get_logger("pipeline").debug("p-debug", cpus="0-3")
        get_logger("daemon").debug("d-debug")
        get_logger("daemon").info("d-info")
    finally:
        structlog.reset_defaults()
    return out.getvalue().splitlines()


def test_per_component_debug_and_json_format() -> None:
    lines = _emit(LogConfig(level="info", format=LogFormat.JSON, debug=("pipeline",)))
    events = [json.loads(line) for line in lines]
    assert [e["event"] for e in events] == ["p-debug", "d-info"]
    assert events[0]["component"] == "pipeline" and events[0]["cpus"] == "0-3"
    assert events[0]["level"] == "debug"


def test_auto_format_is_json_when_not_a_terminal() -> None:
    lines = _emit(LogConfig(level="debug"))
    assert len(lines) == 3
    assert all(json.loads(line)["event"] for line in lines)


def test_log_file(tmp_path: Path) -> None:
    path = tmp_path / "resmgr.log"
    opened = configure_logging(LogConfig(file=str(path), format=LogFormat.JSON))
    try:
        get_logger("daemon").info("to-file")
    finally:
        structlog.reset_defaults()
        assert opened is not None
        opened.close()
    assert json.loads(path.read_text().splitlines()[0])["event"] == "to-file"
