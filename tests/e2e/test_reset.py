"""Uninstall un-pins (issue 10 items 11 and 12) on a real containerd, read back from cgroups.

On this 2-CPU, 1-node machine the static policy (CPU 0 reserved) gives a Guaranteed
1-CPU container CPU 1 exclusively and squeezes every shared container onto CPU 0.  After
the daemon is gone, `nri-resmgr reset` (external daemon) or `nri-resmgr uninstall`
(pre-registered daemon: it stops the instance containerd launched, then resets) must
give every container's cgroup the whole machine back: `cpuset.cpus` = the online CPUs
and `cpuset.mems` = the memory nodes, as the kernel shows them.

Item 12: a pod whose cgroup parent is not a kubelet pod cgroup (nerdctl, ctr) with a
Guaranteed-shaped container must get an exclusive CPU, as a kubelet pod would.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import cri
from tests.e2e.conftest import plugin_failures, python, python_env, wait_plugin_synchronized
from tests.e2e.containerd import Containerd
from tests.e2e.resmgr import (
    PLUGIN,
    PREREG_REGISTRATION_TIMEOUT,
    STATIC,
    Daemon,
    await_cpus,
)
from tests.e2e.resmgr import daemon as daemon
from tests.support.requirements import REPO

FULL_CPUS = "0-1"


def _full_mems() -> str:
    node = Path("/sys/devices/system/node")
    for name in ("has_memory", "online"):
        if (node / name).exists():
            return (node / name).read_text().strip()
    return "0"


def _pin(ctd: Containerd) -> list[cri.Container]:
    """The static scenario's placements: pg exclusive on CPU 1, the others squeezed to 0."""
    web = cri.run_pod(ctd, "web", qos=cri.QoS.BURSTABLE)
    b = cri.run_container(ctd, web, "app", resources=cri.BURSTABLE_SMALL)
    be = cri.run_pod(ctd, "batch", qos=cri.QoS.BESTEFFORT)
    e = cri.run_container(ctd, be, "job", resources=cri.BESTEFFORT)
    db = cri.run_pod(ctd, "db", qos=cri.QoS.GUARANTEED)
    g = cri.run_container(ctd, db, "pg", resources=cri.GUARANTEED_1CPU)
    assert cri.cpus_of(ctd, g) == "1"
    await_cpus(ctd, b, "0", "shared pool shrank")
    await_cpus(ctd, e, "0", "shared pool shrank")
    return [b, e, g]


def _assert_full(ctd: Containerd, containers: list[cri.Container]) -> None:
    mems = _full_mems()
    for c in containers:
        view = cri.kernel_view(ctd, c)
        assert (view.cpus, view.allowed_cpus) == (FULL_CPUS, FULL_CPUS), (c.name, view)
        assert (view.mems, view.allowed_mems) == (mems, mems), (c.name, view)


def _reset_argv(ctd: Containerd) -> list[str]:
    return [
        "--socket", str(ctd.layout.nri_socket), "--sysfs-root", "/",
        "--state-dir", str(ctd.layout.base / "resmgr-state"), "--timeout", "30",
    ]  # fmt: skip


def test_reset_after_the_external_daemon_stopped(
    containerd: Containerd, daemon: Callable[[dict[str, Any]], Daemon]
) -> None:
    d = daemon(STATIC).start()
    d.wait_synced(1)
    pinned = _pin(containerd)
    assert d.proc is not None
    d.proc.stop()
    assert not d.proc.alive()
    r = subprocess.run(
        [python(), "-m", "nri_resmgr.cli", "reset", *_reset_argv(containerd)],
        capture_output=True, text=True, env=python_env(), cwd=REPO, timeout=120, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert "3 containers, 3 pinned" in r.stdout, r.stdout
    assert "reset pod e2e/db container pg" in r.stdout, r.stdout
    _assert_full(containerd, pinned)
    assert plugin_failures(containerd) == []
    # a second run finds nothing left to do
    again = subprocess.run(
        [python(), "-m", "nri_resmgr.cli", "reset", *_reset_argv(containerd)],
        capture_output=True, text=True, env=python_env(), cwd=REPO, timeout=120, check=False,
    )  # fmt: skip
    assert again.returncode == 0 and "3 containers, 0 pinned" in again.stdout, again.stdout


@pytest.mark.registration_timeout(PREREG_REGISTRATION_TIMEOUT)
def test_uninstall_stops_the_preregistered_daemon_and_resets(
    containerd: Containerd, daemon: Callable[[dict[str, Any]], Daemon]
) -> None:
    config = containerd.layout.base / "static.json"
    config.write_text(json.dumps(STATIC))
    log = containerd.layout.base / "resmgr-prereg.log"
    base = str(containerd.layout.base)
    r = subprocess.run(
        [python(), "-m", "nri_resmgr.cli", "install", "--index", "90", "--root", base,
         "--policy", "static", "--config", str(config), "--log-file", str(log),
         f"--run-arg=--state-dir={containerd.layout.base / 'resmgr-state'}"],
        capture_output=True, text=True, env=python_env(), cwd=REPO, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    launcher = containerd.layout.plugin_path / PLUGIN
    containerd.restart()
    try:
        wait_plugin_synchronized(containerd, PLUGIN)
    except AssertionError as exc:
        text = log.read_text() if log.exists() else "(no log file)"
        raise AssertionError(f"{exc}\n--- daemon log ---\n{text[-3000:]}") from None
    pinned = _pin(containerd)
    reset_args = [f"--reset-arg={a}" for a in _reset_argv(containerd)]
    u = subprocess.run(
        [python(), "-m", "nri_resmgr.cli", "uninstall", "--index", "90", "--root", base,
         *reset_args],
        capture_output=True, text=True, env=python_env(), cwd=REPO, timeout=120, check=False,
    )  # fmt: skip
    assert u.returncode == 0, u.stdout + u.stderr
    assert not launcher.exists()
    assert "stopped the running instance, pid" in u.stdout, u.stdout
    assert "3 containers, 3 pinned" in u.stdout, u.stdout
    _assert_full(containerd, pinned)
    # nothing re-pins afterwards: a new container changes no other container's cpuset
    extra_pod = cri.run_pod(containerd, "late", qos=cri.QoS.GUARANTEED)
    extra = cri.run_container(containerd, extra_pod, "late", resources=cri.GUARANTEED_1CPU)
    _assert_full(containerd, [*pinned, extra])


def _run_foreign_pod(ctd: Containerd, name: str) -> cri.Pod:
    """A pod as nerdctl/ctr would make it: its cgroup parent is no kubelet pod cgroup."""
    uid = str(uuid.uuid4())
    parent = f"/{cri.CGROUP_TOP}/default"
    config = {
        "metadata": {"name": name, "namespace": "default", "uid": uid, "attempt": 0},
        "log_directory": str(ctd.layout.base / "pod-logs" / uid),
        "labels": {"app": name},
        "linux": {
            "cgroup_parent": parent,
            "security_context": {"namespace_options": {"network": 2, "pid": 1, "ipc": 0}},
        },
    }
    path = ctd.layout.base / "specs" / f"pod-{name}-{uid[:8]}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config))
    r = ctd.crictl("runp", str(path))
    return cri.Pod(r.stdout.strip(), name, "default", uid, path, parent)


def test_a_guaranteed_container_of_a_foreign_pod_gets_an_exclusive_cpu(
    containerd: Containerd, daemon: Callable[[dict[str, Any]], Daemon]
) -> None:
    d = daemon(STATIC).start()
    d.wait_synced(1)
    shared_pod = cri.run_pod(containerd, "web", qos=cri.QoS.BURSTABLE)
    shared = cri.run_container(containerd, shared_pod, "app", resources=cri.BURSTABLE_SMALL)
    foreign = _run_foreign_pod(containerd, "nerdctl-db")
    g = cri.run_container(containerd, foreign, "pg", resources=cri.GUARANTEED_1CPU)
    assert cri.cpus_of(containerd, g) == "1"
    await_cpus(containerd, shared, "0", "the exclusive CPU left the shared pool")
    assert plugin_failures(containerd) == []
