"""validate-config: one clear message per error, with its path in the document."""

from __future__ import annotations

from pathlib import Path

import pytest

from nri_resmgr.cli import main

TOPO = "{packages: 2, nodes: 1, cores: 2, threads: 2, memory: 1G}"


def run(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    f = tmp_path / "c.yaml"
    f.write_text(text)
    rc = main(["validate-config", str(f), "--topology", TOPO])
    err = capsys.readouterr().err
    lines = [ln.removeprefix(f"{f}: ") for ln in err.splitlines()]
    return rc, lines


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("polcy: none\n", ["polcy: unknown key"], id="typo-key"),
        pytest.param(
            "log: {level: loud, format: xml}\n",
            ["log.level: expected one of debug, info, warning, error, critical, found 'loud'",
             "log.format: Input should be 'auto', 'json' or 'console', found 'xml'"],
            id="two-errors-two-lines",
        ),
        pytest.param("policy: nosuch\n",
                     ["policy: unknown policy 'nosuch'; expected one of none, static, "
                      "topology-aware"], id="unknown-policy"),
        pytest.param("- a\n- b\n", ["(document): expected a mapping, found list"], id="not-a-map"),
        pytest.param("policy: ''\n",
                     ["policy: expected a policy name, found an empty string"], id="empty-policy"),
        pytest.param("instrumentation: {httpEndpoint: 5}\n",
                     ["instrumentation.httpEndpoint: Input should be a valid string, found 5"],
                     id="wrong-type"),
    ],
)
def test_broken_configs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expected: list[str]
) -> None:
    rc, lines = run(tmp_path, text, capsys)
    assert rc == 1
    assert lines[:-1] == expected
    assert lines[-1] == f"{len(expected)} error(s)"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        pytest.param("policy: static\npolicyConfig: {reservedSystemCPUs: '0-99'}\n", "0-99",
                     id="static-reserved-off-machine"),
        pytest.param("policy: topology-aware\npolicyConfig: {pinCPU: maybe}\n", "pinCPU",
                     id="ta-bad-bool"),
        pytest.param("policy: topology-aware\npolicyConfig: {reservedResources: {cpu: lots}}\n",
                     "lots", id="ta-bad-quantity"),
    ],
)
def test_policy_config_errors_name_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, fragment: str
) -> None:
    rc, lines = run(tmp_path, text, capsys)
    assert rc == 1
    assert len(lines) == 2 and fragment in lines[0]
    assert lines[0].startswith("policy")


def test_valid_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "ok.yaml"
    f.write_text("policy: topology-aware\npolicyConfig: {reservedResources: {cpu: 750m}}\n")
    assert main(["validate-config", str(f), "--topology", TOPO]) == 0
    assert capsys.readouterr().out.strip() == f"{f}: valid"


def test_unreadable_and_broken_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate-config", str(tmp_path / "missing.yaml")]) == 1
    assert "cannot read" in capsys.readouterr().err
    rc, lines = run(tmp_path, "policy: [unclosed\n", capsys)
    assert rc == 1 and "not valid YAML" in lines[0]
