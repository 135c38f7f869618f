"""The e2e kit's `Process.stacks` (tests/e2e/conftest.py): a live Python child that a
synchronization wait gave up on leaves every thread's stack in the failure; a child that
has exited is left alone."""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path

from tests.e2e.conftest import Process, python_env

STUCK = textwrap.dedent(
    """
    import time
    def waiting_for_the_runtime():
        time.sleep(300)
    print("up", flush=True)
    waiting_for_the_runtime()
    """
)


def _wait_for_output(p: Process, text: str) -> None:
    deadline = time.monotonic() + 60
    while text not in p.output():
        assert p.alive() and time.monotonic() < deadline, p.output()
        time.sleep(0.05)


def test_a_stuck_child_shows_where_it_waits(tmp_path: Path) -> None:
    p = Process([sys.executable, "-c", STUCK], tmp_path / "child.log", python_env()).start()
    try:
        _wait_for_output(p, "up")
        stacks = p.stacks()
    finally:
        p.kill9()
    assert stacks.startswith("Fatal Python error: Aborted"), stacks
    assert "in waiting_for_the_runtime" in stacks, stacks
    assert not p.alive()


def test_an_exited_child_is_left_alone(tmp_path: Path) -> None:
    p = Process([sys.executable, "-c", "pass"], tmp_path / "child.log", python_env()).start()
    assert p.proc is not None
    p.proc.wait(60)
    assert p.stacks() == "(the process had exited)"
