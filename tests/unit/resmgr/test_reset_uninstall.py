"""`uninstall` stops the instance the runtime launched, then resets (issue 10 item 11).

A launcher written by `install`, started the way the runtime starts it (exec of the file:
the kernel runs its shebang ``<python> -I`` on it), is a real process here; `uninstall`
must find exactly it, stop it, and only then run the reset.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nri_resmgr.cli import main
from nri_resmgr.ops.install import find_launched, install, plan_install, stop_launched

#: the launcher's body replaced by a stand-in daemon: runs until SIGTERM, then exits 0;
#: it says it is ready (handler installed) by writing the file next to the launcher
_STAND_IN = "signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))"
#: a stand-in that ignores SIGTERM, as a hung daemon would
_STUBBORN = "signal.signal(signal.SIGTERM, signal.SIG_IGN)"


def _write_launcher(root: Path, handler: str) -> Path:
    plan = plan_install(root=root, index="90", log_file=str(root / "log"))
    head = plan.launcher_text.split("import sys\n", 1)[0]  # shebang and marker lines
    body = (
        f"import signal, sys, time\n{handler}\n"
        f"open({str(plan.launcher) + '.ready'!r}, 'w').close()\ntime.sleep(120)\n"
    )
    install(plan.__class__(plan.launcher, plan.config, head + body, plan.config_text))
    return plan.launcher


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=10)


def _start(launcher: Path, procs: list[subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    # as the runtime does it: exec the file itself, empty environment
    proc = subprocess.Popen([str(launcher)], env={})
    procs.append(proc)
    ready = Path(f"{launcher}.ready")
    deadline = time.monotonic() + 10
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert ready.exists(), "the stand-in daemon did not start"
    return proc


def test_find_launched_matches_the_shebang_argv_only(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    launcher = Path("/opt/nri/plugins/90-resmgr")
    table = {
        "101": ["/usr/bin/python3", "-I", "/opt/nri/plugins/90-resmgr"],  # the launched one
        "102": ["vim", "/opt/nri/plugins/90-resmgr"],  # someone looking at the file
        "103": ["/usr/bin/python3", "-I", "/opt/nri/plugins/90-resmgr-other"],
        "104": ["/usr/bin/python3", "-I", "/opt/nri/plugins/../plugins/90-resmgr", "x"],
        "105": [],  # a kernel thread (empty cmdline)
    }
    for pid, argv in table.items():
        (proc / pid).mkdir(parents=True)
        (proc / pid / "cmdline").write_bytes(b"".join(a.encode() + b"\0" for a in argv))
    (proc / "self").mkdir()
    assert find_launched(launcher, proc=proc) == [101, 104]


def test_uninstall_stops_the_launched_instance_before_the_reset(
    tmp_path: Path, started: list[subprocess.Popen[bytes]], capsys: pytest.CaptureFixture[str]
) -> None:
    launcher = _write_launcher(tmp_path, _STAND_IN)
    proc = _start(launcher, started)
    assert find_launched(launcher) == [proc.pid]
    code = main(
        [
            "uninstall",
            "--index",
            "90",
            "--root",
            str(tmp_path),
            f"--reset-arg=--socket={tmp_path / 'absent.sock'}",
        ]
    )
    out, err = capsys.readouterr()
    # the files went, the instance was stopped, then the reset ran (and had no runtime)
    assert proc.wait(timeout=10) == 0
    assert not launcher.exists()
    assert f"stopped the running instance, pid {proc.pid}: stopped (SIGTERM)" in out
    assert code == 1
    assert f"NRI socket {tmp_path / 'absent.sock'}: expected the runtime to listen" in err
    assert "the files are removed, but the reset failed" in err


def test_no_reset_leaves_containers_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write_launcher(tmp_path, _STAND_IN)
    assert main(["uninstall", "--index", "90", "--root", str(tmp_path), "--no-reset"]) == 0
    assert "containers left as they are (--no-reset)" in capsys.readouterr().out


def test_a_hung_instance_is_killed_after_the_grace_period(
    tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    launcher = _write_launcher(tmp_path, _STUBBORN)
    proc = _start(launcher, started)
    t0 = time.monotonic()
    assert stop_launched([proc.pid], grace=0.5) == [f"pid {proc.pid}: killed (SIGKILL after 0.5 s)"]
    assert proc.wait(timeout=10) == -signal.SIGKILL
    assert time.monotonic() - t0 < 5


def test_a_pid_already_gone_is_reported_not_fatal() -> None:
    # a pid that cannot exist: above the kernel's pid_max limit
    assert stop_launched([2**22 + 1], grace=0.1) == [f"pid {2**22 + 1}: already gone"]


def test_processes_of_other_launchers_are_never_signalled(
    tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    other_root = tmp_path / "other"
    other = _write_launcher(other_root, _STAND_IN)
    bystander = _start(other, started)
    mine = tmp_path / "mine"
    _write_launcher(mine, _STAND_IN)
    assert main(["uninstall", "--index", "90", "--root", str(mine), "--no-reset"]) == 0
    assert bystander.poll() is None
    os.kill(bystander.pid, signal.SIGTERM)
    assert bystander.wait(timeout=10) == 0
