"""install / uninstall of the pre-registered launcher."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from nri_resmgr.cli import main
from nri_resmgr.ops.install import plan_install


def test_install_writes_launcher_and_config_then_uninstall_removes_exactly_them(
    tmp_path: Path,
) -> None:
    cfg = tmp_path / "my.yaml"
    cfg.write_text("policy: static\n")
    foreign = tmp_path / "opt/nri/plugins/10-other"
    foreign.parent.mkdir(parents=True)
    foreign.write_text("#!/bin/sh\n")
    assert (
        main(
            [
                "install",
                "--index",
                "90",
                "--root",
                str(tmp_path),
                "--config",
                str(cfg),
                "--log-file",
                str(tmp_path / "log"),
            ]
        )
        == 0
    )
    launcher = tmp_path / "opt/nri/plugins/90-resmgr"
    conf = tmp_path / "etc/nri/conf.d/90-resmgr.conf"
    assert launcher.read_text().startswith(f"#!{sys.executable} -I\n")
    assert os.path.isabs(sys.executable)
    assert stat.S_IMODE(launcher.stat().st_mode) == 0o755
    assert conf.read_text().endswith("policy: static\n")
    assert main(["uninstall", "--index", "90", "--root", str(tmp_path), "--no-reset"]) == 0
    assert not launcher.exists() and not conf.exists()
    assert foreign.exists()


def test_launcher_runs_with_an_empty_environment(tmp_path: Path) -> None:
    """The runtime gives no PATH or PYTHONPATH: the launcher must still import us."""
    plan = plan_install(root=tmp_path, index="90", log_file=str(tmp_path / "log"))
    text = plan.launcher_text.rsplit("sys.exit(", 1)[0] + "sys.exit(main(['--help']))\n"
    script = tmp_path / "probe"
    script.write_text(text)
    script.chmod(0o755)
    out = subprocess.run([str(script)], env={}, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "nri-resmgr" in out.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--index", "9"], "install: plugin index '9' is invalid; expected two digits, e.g. 90"),
        (
            ["--index", "90", "--name", "bad/name"],
            "install: plugin name 'bad/name' is invalid; expected characters [A-Za-z0-9_.+-]",
        ),
        (
            ["--index", "90", "--python", "python3"],
            "install: interpreter 'python3' is not an absolute path",
        ),
    ],
)
def test_install_rejects_bad_arguments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    """One line, with the command's prefix once (it was `install: install: ...`)."""
    assert main(["install", "--root", str(tmp_path), *args]) == 1
    assert capsys.readouterr().err.splitlines() == [message]
    assert not (tmp_path / "opt").exists()


def test_foreign_files_are_never_overwritten_or_removed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    launcher = tmp_path / "opt/nri/plugins/90-resmgr"
    launcher.parent.mkdir(parents=True)
    launcher.write_text("#!/bin/sh\necho someone else's\n")
    assert main(["install", "--index", "90", "--root", str(tmp_path)]) == 1
    assert "not written by nri-resmgr" in capsys.readouterr().err
    assert main(["uninstall", "--index", "90", "--root", str(tmp_path)]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"uninstall: {launcher} was not written by nri-resmgr; leaving it in place"
    ]
    assert launcher.read_text() == "#!/bin/sh\necho someone else's\n"
