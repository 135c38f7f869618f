"""The README's sample output is what its command prints."""

from __future__ import annotations

import re
import shlex

import pytest

from nri_resmgr.cli import main
from tests.support.requirements import REPO

README = REPO / "README.md"


def shown_session(command: str = "simulate") -> tuple[list[str], list[str]]:
    """The README's ``$ nri-resmgr COMMAND ...`` block: (argv, the lines shown after it)."""
    text = README.read_text(encoding="utf-8")
    pattern = rf"```\n\$ (nri-resmgr {command} [^\n]*)\n(.*?)```"
    m = re.search(pattern, text, flags=re.DOTALL)
    assert m, f"{README}: no ``` block starting with '$ nri-resmgr {command}'"
    argv = shlex.split(m.group(1))[1:]
    # the README annotates rows with '<- why'; the program does not print those
    lines = [line.split("  <- ")[0].rstrip() for line in m.group(2).splitlines()]
    return argv, lines


def test_readme_sample_output_is_what_the_command_prints(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    argv, shown = shown_session()
    monkeypatch.chdir(REPO)
    assert main(argv) == 0
    printed = capsys.readouterr().out.splitlines()
    # the header is shown whole; after it, an excerpt: each shown line in order
    assert shown[:2] == printed[:2]
    at = 2
    for line in shown[2:]:
        assert line in printed[at:], f"README shows {line!r}, which the command does not print"
        at = printed.index(line, at) + 1


@pytest.mark.parametrize("command", ["show", "explain"])
def test_readme_excerpt_is_what_the_command_prints(
    command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    argv, shown = shown_session(command)
    monkeypatch.chdir(REPO)
    assert main(argv) == 0
    printed = [line.rstrip() for line in capsys.readouterr().out.splitlines()]
    assert shown[0] == printed[0]
    at = 1
    for line in shown[1:]:
        assert line in printed[at:], f"README shows {line!r}, which the command does not print"
        at = printed.index(line, at) + 1
