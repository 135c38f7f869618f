"""enable-nri --require: the runtimes' default validator configured to fail closed.

The containerd keys are checked against the real NRI library in
tests/conformance/test_fail_closed.py and against real containerd in
tests/e2e/test_enable_nri_real.py; CRI-O's keys, which CRI-O defines itself, against its
source where Go's module cache has it.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from nri_resmgr.cli import main
from nri_resmgr.model import ConfigError
from nri_resmgr.ops.runtime_config import (
    NRI_TABLE,
    TOLERATE_ANNOTATION,
    NRISettings,
    Runtime,
    edit,
)
from tests.e2e.crio import CRIO
from tests.support.requirements import go_module_cache, require

REQUIRE = NRISettings(require=("resmgr",))
#: CRI-O's NRI configuration in the source the peers' build downloads (tests.build_peers)
CRIO_NRI_GO = Path(f"{CRIO.module}@v{CRIO.version}") / "internal" / "config" / "nri" / "nri.go"


def test_dry_run_shows_the_validator_table_and_says_what_it_means(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "config.toml"
    target.write_text("version = 3\n")
    args = ["enable-nri", "--runtime", "containerd", "--config", str(target)]
    assert main([*args, "--require", "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert out == (
        f"--- {target} (current)\n+++ {target} (with NRI enabled)\n@@ -1 +1,9 @@\n"
        " version = 3\n+\n"
        f'+[plugins."{NRI_TABLE}"]\n+disable = false\n+\n'
        f'+[plugins."{NRI_TABLE}".default_validator]\n'
        "+enable = true\n"
        '+required_plugins = ["resmgr"]\n'
        f'+tolerate_missing_plugins_annotation = "{TOLERATE_ANNOTATION}"\n'
    )
    assert err == (
        "enable-nri: --require: containers fail to create while plugin(s) 'resmgr' are not "
        f'connected, unless their pod is annotated {TOLERATE_ANNOTATION}: "true" (the kubelet '
        "retries); this needs containerd 2.2 or later, older releases ignore the setting and "
        "create such containers unplaced\n"
    )
    assert target.read_text() == "version = 3\n"


def test_without_require_no_validator_is_written() -> None:
    out = edit(Runtime.CONTAINERD, "version = 3\n", NRISettings(), path="c.toml")
    assert "default_validator" not in out


def test_other_required_plugins_are_kept_and_ours_added_once() -> None:
    text = (
        "version = 3\n"
        f'[plugins."{NRI_TABLE}".default_validator]\n'
        "enable = false\n"
        'required_plugins = ["10-logger", "resmgr"]\n'
        "reject_oci_hook_adjustment = true\n"
    )
    settings = NRISettings(require=("resmgr", "balloons"), tolerate_annotation="my.key")
    once = edit(Runtime.CONTAINERD, text, settings, path="c.toml")
    validator = tomllib.loads(once)["plugins"][NRI_TABLE]["default_validator"]
    assert validator == {
        "enable": True,
        "required_plugins": ["10-logger", "resmgr", "balloons"],
        "reject_oci_hook_adjustment": True,
        "tolerate_missing_plugins_annotation": "my.key",
    }
    assert edit(Runtime.CONTAINERD, once, settings, path="c.toml") == once


def test_crio_dropin_uses_crio_names() -> None:
    out = edit(Runtime.CRIO, "", REQUIRE, path="10-enable-nri.conf")
    assert tomllib.loads(out) == {
        "crio": {
            "nri": {
                "enable_nri": True,
                "default_validator": {
                    "nri_enable_default_validator": True,
                    "nri_validator_required_plugins": ["resmgr"],
                    "nri_validator_tolerate_missing_plugins_annotation": TOLERATE_ANNOTATION,
                },
            }
        }
    }


def test_crio_names_are_the_ones_crio_reads() -> None:
    source = go_module_cache() / CRIO_NRI_GO
    require(
        source.is_file(),
        f"CRI-O's source is not in Go's module cache ({source}; python3 -m tests.build_peers)",
    )
    tags = set(re.findall(r'toml:"([a-z_]+)"', source.read_text()))
    out = edit(Runtime.CRIO, "", REQUIRE, path="d.conf")
    nri = tomllib.loads(out)["crio"]["nri"]
    assert "default_validator" in tags
    assert set(nri["default_validator"]) <= tags


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        pytest.param(
            NRISettings(require=("res mgr",)),
            "required plugin 'res mgr' is not a plugin name; expected e.g. 'resmgr'",
            id="bad-name",
        ),
        pytest.param(
            NRISettings(require=("resmgr",), tolerate_annotation="example.com/tolerate"),
            "tolerate annotation 'example.com/tolerate' is not an annotation name without a "
            "prefix",
            id="prefixed-annotation",
        ),
    ],
)
def test_bad_names_are_refused(settings: NRISettings, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        edit(Runtime.CONTAINERD, "version = 3\n", settings, path="c.toml")


def test_a_validator_that_is_not_a_table_is_named() -> None:
    text = f'version = 3\n[plugins."{NRI_TABLE}"]\ndefault_validator = 1\n'
    with pytest.raises(ConfigError, match="default_validator is not a table"):
        edit(Runtime.CONTAINERD, text, REQUIRE, path="c.toml")
    text = f'version = 3\n[plugins."{NRI_TABLE}".default_validator]\nrequired_plugins = "x"\n'
    with pytest.raises(ConfigError, match="required_plugins is 'x'; expected a list"):
        edit(Runtime.CONTAINERD, text, REQUIRE, path="c.toml")


@pytest.mark.parametrize("runtime", [Runtime.CONTAINERD, Runtime.CRIO])
def test_no_require_takes_only_ours_out_again(tmp_path: Path, runtime: Runtime) -> None:
    target = tmp_path / "config"
    target.write_text("version = 3\n" if runtime is Runtime.CONTAINERD else "")
    args = ["enable-nri", "--runtime", runtime.value, "--config", str(target)]
    assert main([*args, "--require", "--plugin-name", "other"]) == 0
    assert main([*args, "--require"]) == 0
    assert main([*args, "--no-require"]) == 0
    doc = tomllib.loads(target.read_text())
    if runtime is Runtime.CONTAINERD:
        assert doc["plugins"][NRI_TABLE]["default_validator"]["required_plugins"] == ["other"]
    else:
        assert doc["crio"]["nri"]["default_validator"]["nri_validator_required_plugins"] == [
            "other"
        ]


def test_require_and_no_require_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["enable-nri", "--runtime", "crio", "--require", "--no-require"])
    assert "not allowed with argument" in capsys.readouterr().err
