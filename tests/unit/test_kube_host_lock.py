"""A kube test node's names held for one run alone (tests/e2e_kube/host.py, `held`): a
second holder waits and then fails naming the first, and a process started with the
locked descriptors (the kubelets) keeps the names held after the run that took them."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e_kube import host
from tests.support.requirements import REPO

HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from tests.e2e_kube import host
    host.LOCK_DIR = Path(sys.argv[1])
    with host.held(["nrk0"], timeout=5):
        print("held", flush=True)
        sys.stdin.read()  # until the test closes it
    """
)


@pytest.fixture
def lock_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(host, "LOCK_DIR", tmp_path)
    return tmp_path


@pytest.fixture
def other_run(lock_dir: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holding ``nrk0`` until its stdin closes."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(lock_dir)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_a_name_another_run_holds_is_waited_for_then_refused_naming_it(
    other_run: subprocess.Popen[str],
) -> None:
    with pytest.raises(TimeoutError) as err, host.held(["nrk0"], timeout=0.3, poll=0.05):
        pass
    message = str(err.value)
    assert "test node name 'nrk0'" in message and "within 0.3 s" in message, message
    assert f"{other_run.pid} (" in message, message
    # other names are free meanwhile
    with host.held(["nrk1"], timeout=0.3, poll=0.05) as fds:
        assert len(fds) == 1


def test_a_name_is_free_again_when_its_run_ends(other_run: subprocess.Popen[str]) -> None:
    assert other_run.stdin is not None
    other_run.stdin.close()
    other_run.wait(10)
    with host.held(["nrk0", "nrk0"], timeout=1, poll=0.05) as fds:
        assert len(fds) == 1  # one lock a name


def test_a_process_started_with_the_locks_keeps_the_names_after_the_run(lock_dir: Path) -> None:
    with host.held(["nrkc-a", "nrkc-b"], timeout=1) as fds:
        kubelet = subprocess.Popen(["sleep", "60"], pass_fds=fds)
    try:
        refused = rf"nrkc-a.*{kubelet.pid} \(sleep 60\)"
        with pytest.raises(TimeoutError, match=refused), host.held(["nrkc-a"], timeout=0.3):
            pass
    finally:
        kubelet.kill()
        kubelet.wait()
    with host.held(["nrkc-a", "nrkc-b"], timeout=1, poll=0.05):
        pass
