"""enable-nri: exact edits of real-format containerd (1.7 / 2.x) and CRI-O files."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from nri_resmgr.cli import main
from nri_resmgr.model import ConfigError
from nri_resmgr.ops.runtime_config import NRISettings, Runtime, edit, unified_diff

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize(
    ("sample", "runtime"),
    [
        pytest.param("containerd-1.7-config.toml", "containerd", id="containerd-1.7-v2-layout"),
        pytest.param("containerd-2.x-config.toml", "containerd", id="containerd-2.x-v3-layout"),
        pytest.param("crio-existing-dropin.conf", "crio", id="crio-dropin"),
    ],
)
def test_dry_run_diff_is_exact_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], sample: str, runtime: str
) -> None:
    """The expected diffs are the files `data/<sample>.diff`, written by hand."""
    expected = (DATA / f"{sample}.diff").read_text()
    target = tmp_path / sample
    original = (DATA / sample).read_text()
    target.write_text(original)
    rc = main(
        [
            "enable-nri",
            "--runtime",
            runtime,
            "--config",
            str(target),
            "--request-timeout",
            "3s",
            "--dry-run",
        ]
    )
    assert rc == 0
    assert capsys.readouterr().out == expected.format(p=target)
    assert target.read_text() == original


@pytest.mark.parametrize("sample", ["containerd-1.7-config.toml", "containerd-2.x-config.toml"])
def test_written_file_keeps_everything_else(tmp_path: Path, sample: str) -> None:
    target = tmp_path / "config.toml"
    original = (DATA / sample).read_text()
    target.write_text(original)
    assert (
        main(
            [
                "enable-nri",
                "--runtime",
                "containerd",
                "--config",
                str(target),
                "--registration-timeout",
                "10s",
            ]
        )
        == 0
    )
    before = tomllib.loads(original)
    after = tomllib.loads(target.read_text())
    nri = after["plugins"].pop("io.containerd.nri.v1.nri")
    before["plugins"].pop("io.containerd.nri.v1.nri", None)
    assert after == before
    assert nri["disable"] is False
    assert nri["plugin_registration_timeout"] == "10s"
    # idempotent: a second run changes nothing
    text = target.read_text()
    assert edit(Runtime.CONTAINERD, text, NRISettings(registration_timeout="10s"), path="x") == text


def test_missing_file_is_created_in_v2_layout(tmp_path: Path) -> None:
    target = tmp_path / "etc" / "containerd" / "config.toml"
    assert main(["enable-nri", "--runtime", "containerd", "--config", str(target)]) == 0
    assert tomllib.loads(target.read_text()) == {
        "version": 2,
        "plugins": {"io.containerd.nri.v1.nri": {"disable": False}},
    }


def test_crio_new_dropin(tmp_path: Path) -> None:
    target = tmp_path / "crio.conf.d" / "10-enable-nri.conf"
    assert main(["enable-nri", "--runtime", "crio", "--config", str(target)]) == 0
    assert target.read_text() == "[crio.nri]\nenable_nri = true\n"


@pytest.mark.parametrize(
    ("text", "settings", "message"),
    [
        pytest.param("[plugins]\n", NRISettings(), "version 1 layout", id="v1-layout"),
        pytest.param("version = 1\n", NRISettings(), "version = 1", id="version-1"),
        pytest.param("version = 'x'\n", NRISettings(), "version = 'x'", id="version-not-int"),
        pytest.param(
            "version = 2\nplugins = 3\n", NRISettings(), "'plugins' is a", id="plugins-scalar"
        ),
        pytest.param("version = [\n", NRISettings(), "not valid TOML", id="broken-toml"),
        pytest.param(
            "version = 2\n",
            NRISettings(request_timeout="2 seconds"),
            "not a Go duration",
            id="bad-duration",
        ),
    ],
)
def test_bad_input_is_refused_with_a_clear_message(
    text: str, settings: NRISettings, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        edit(Runtime.CONTAINERD, text, settings, path="config.toml")


def test_command_reports_errors_without_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "config.toml"
    target.write_text("[plugins]\n")
    assert main(["enable-nri", "--runtime", "containerd", "--config", str(target)]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"enable-nri: {target}: no 'version' key, so this is the version 1 layout, which "
        "predates NRI; expected version = 2 (containerd 1.7), version = 3 (containerd "
        "2.0-2.2), version = 4 (containerd 2.3), or a later version (at least 2)"
    ]
    assert target.read_text() == "[plugins]\n"


def test_diff_helper_empty_when_unchanged() -> None:
    assert unified_diff("a\n", "a\n", path="x") == ""


def test_a_bad_duration_is_named_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "config.toml"
    target.write_text("version = 3\n")
    args = ["enable-nri", "--runtime", "containerd", "--config", str(target)]
    assert main([*args, "--request-timeout", "2 seconds"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "enable-nri: request timeout '2 seconds' is not a Go duration; expected e.g. '5s', '2500ms'"
    ]


@pytest.mark.parametrize("version", [2, 3, 4, 5])
def test_every_layout_the_message_names_is_accepted(version: int) -> None:
    """The refusal lists the accepted layouts; each of them (and a later one) is accepted."""
    from nri_resmgr.ops.runtime_config import LAYOUTS

    assert set(LAYOUTS) == {2, 3, 4}
    out = edit(Runtime.CONTAINERD, f"version = {version}\n", NRISettings(), path="c.toml")
    assert f"version = {version}" in out and "disable = false" in out
