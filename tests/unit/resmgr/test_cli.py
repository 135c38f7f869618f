"""The command line as a whole: --version, and a reader that closes the pipe early."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import nri_resmgr
from nri_resmgr.cli import main
from tests.support.requirements import REPO


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == f"nri-resmgr {nri_resmgr.__version__}\n"


def test_version_is_the_packages_version() -> None:
    from importlib.metadata import version

    assert version("nri-resmgr") == nri_resmgr.__version__


@pytest.mark.parametrize(
    "args",
    [["topology", "--topology", "two-socket"], ["topology", "--topology", "two-socket", "--json"]],
    ids=["tree", "json"],
)
def test_a_closed_pipe_is_not_a_traceback(args: list[str]) -> None:
    """`nri-resmgr topology | head`: the reader is gone before the command writes."""
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "nri_resmgr.cli", *args],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
    finally:
        os.close(write)
    assert proc.stderr == ""
    assert proc.returncode == 1
