"""enable-nri output read back by a real containerd (1.7 and 2.x, built from their modules).

For each release: its own `config default`, and our real-format samples, are edited by
`nri-resmgr enable-nri`; the real containerd then parses the result (`config dump`) and
reports NRI enabled with the timeout we set.
"""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

import pytest

from nri_resmgr.cli import main
from nri_resmgr.ops.runtime_config import TOLERATE_ANNOTATION
from tests.e2e.containerd import RELEASES, build
from tests.support.requirements import require_go

pytestmark = pytest.mark.e2e

SAMPLES = Path(__file__).resolve().parents[1] / "unit" / "resmgr" / "data"
NRI = "io.containerd.nri.v1.nri"


@pytest.mark.parametrize(
    ("release", "sample"),
    [
        ("containerd-1.7", None),
        ("containerd-1.7", "containerd-1.7-config.toml"),
        ("containerd-2", None),
        ("containerd-2", "containerd-2.x-config.toml"),
        ("containerd-2", "containerd-1.7-config.toml"),  # a 1.7 file after an upgrade
    ],
)
def test_real_containerd_parses_the_edit(tmp_path: Path, release: str, sample: str | None) -> None:
    containerd = build(RELEASES[release], require_go())["containerd"]
    target = tmp_path / "config.toml"
    if sample is None:
        default = subprocess.run([str(containerd), "config", "default"], check=True,
                                 capture_output=True, text=True).stdout
        target.write_text(default)
    else:
        target.write_text((SAMPLES / sample).read_text())
    assert main(["enable-nri", "--runtime", "containerd", "--config", str(target),
                 "--request-timeout", "3s", "--registration-timeout", "7s"]) == 0
    dump = subprocess.run([str(containerd), "--config", str(target), "config", "dump"],
                          capture_output=True, text=True)
    assert dump.returncode == 0, dump.stderr
    nri = tomllib.loads(dump.stdout)["plugins"][NRI]
    assert nri["disable"] is False
    assert nri["plugin_request_timeout"] == "3s"
    assert nri["plugin_registration_timeout"] == "7s"


@pytest.mark.parametrize("release", ["containerd-1.7", "containerd-2"])
def test_real_containerd_reads_or_ignores_require(tmp_path: Path, release: str) -> None:
    """containerd 2.3 reads the default validator table; 1.7 has none and ignores it."""
    containerd = build(RELEASES[release], require_go())["containerd"]
    target = tmp_path / "config.toml"
    default = subprocess.run([str(containerd), "config", "default"], check=True,
                             capture_output=True, text=True).stdout
    target.write_text(default)
    assert main(["enable-nri", "--runtime", "containerd", "--config", str(target),
                 "--require"]) == 0
    dump = subprocess.run([str(containerd), "--config", str(target), "config", "dump"],
                          capture_output=True, text=True)
    assert dump.returncode == 0, dump.stderr
    nri = tomllib.loads(dump.stdout)["plugins"][NRI]
    if release == "containerd-1.7":
        assert "default_validator" not in nri
        return
    validator = nri["default_validator"]
    assert validator["enable"] is True
    assert validator["required_plugins"] == ["resmgr"]
    assert validator["tolerate_missing_plugins_annotation"] == TOLERATE_ANNOTATION
