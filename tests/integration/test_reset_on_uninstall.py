"""The Helm chart's reset container: reset on uninstall, never on a restart (issue 10.11).

`nri-resmgr reset --on-uninstall NS/DS` runs beside the daemon in its pod and waits for
SIGTERM.  Against a real kube-apiserver (no controllers: deleting a DaemonSet with
background propagation removes the object at once, as the API does before the garbage
collector deletes its pods; foreground propagation leaves it with a deletionTimestamp) it
must reset when the DaemonSet is gone or going, and leave the containers alone when it
still exists (rolling update, pod deletion).  The reset must wait until the daemon's HTTP
port is closed (the daemon container has exited), or the daemon could re-pin.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from nri_api import api
from nri_api.testing import FakeRuntime
from nri_resmgr.kube.uninstall import DaemonSetProbe
from nri_resmgr.model import QoSClass
from nri_resmgr.ops.reset import ResetError, Verdict
from nri_resmgr.topology.synthetic import write_sysfs
from tests.k8s.cluster import TOKEN, Cluster
from tests.support.daemon import MACHINE
from tests.support.messages import ctr, pod
from tests.support.requirements import REPO

RUNNING = api.ContainerState.CONTAINER_RUNNING


def _daemonset(name: str) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": "nri-resmgr:test"}]},
            },
        },
    }


@pytest.fixture
def ds_name(kube_cluster: Cluster) -> str:
    name = f"nri-resmgr-{uuid.uuid4().hex[:8]}"
    kube_cluster.client.request(
        "POST", "/apis/apps/v1/namespaces/default/daemonsets", body=_daemonset(name)
    )
    return name


def _delete(cluster: Cluster, name: str, propagation: str) -> None:
    cluster.client.request(
        "DELETE",
        f"/apis/apps/v1/namespaces/default/daemonsets/{name}",
        body={"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation},
    )


def test_the_verdict_follows_the_daemonset(kube_cluster: Cluster, ds_name: str) -> None:
    probe = DaemonSetProbe(f"default/{ds_name}", kubeconfig=str(kube_cluster.kubeconfig()))
    uid = probe.uid()
    assert uid
    ref = f"default/{ds_name}"
    assert probe.verdict(uid) == (
        Verdict.KEEP,
        f"DaemonSet {ref} still exists: a restart, not an uninstall",
    )
    # foreground deletion: the object stays, marked, while its pods go first
    _delete(kube_cluster, ds_name, "Foreground")
    verdict, why = probe.verdict(uid)
    assert verdict is Verdict.RESET
    assert why.startswith(f"DaemonSet {ref} is being deleted (since 20"), why


def test_gone_or_created_anew_is_an_uninstall(kube_cluster: Cluster, ds_name: str) -> None:
    probe = DaemonSetProbe(f"default/{ds_name}", kubeconfig=str(kube_cluster.kubeconfig()))
    uid = probe.uid()
    # what helm uninstall does: background propagation, the object is gone at once
    _delete(kube_cluster, ds_name, "Background")
    assert probe.verdict(uid) == (Verdict.RESET, "the DaemonSet is gone (uninstalled)")
    kube_cluster.client.request(
        "POST", "/apis/apps/v1/namespaces/default/daemonsets", body=_daemonset(ds_name)
    )
    verdict, why = probe.verdict(uid)
    assert verdict is Verdict.RESET and "was deleted and created anew" in why


def test_revoked_credentials_mean_uninstall_only_if_they_worked_before(
    kube_cluster: Cluster, ds_name: str, tmp_path: Path
) -> None:
    bad = tmp_path / "kubeconfig"
    bad.write_text(kube_cluster.kubeconfig().read_text().replace(TOKEN, "revoked-token"))
    good = DaemonSetProbe(f"default/{ds_name}", kubeconfig=str(kube_cluster.kubeconfig()))
    revoked = DaemonSetProbe(f"default/{ds_name}", kubeconfig=str(bad))
    uid = good.uid()
    verdict, why = revoked.verdict(uid)
    assert verdict is Verdict.RESET
    assert "refuses the credentials that worked at start-up (401)" in why
    # never worked: no evidence either way, keep
    assert revoked.uid() is None
    verdict, why = revoked.verdict(None)
    assert verdict is Verdict.UNKNOWN
    assert why.startswith("cannot tell an uninstall from a restart")


def test_a_bad_reference_is_refused(kube_cluster: Cluster) -> None:
    with pytest.raises(ResetError, match="expected NAMESPACE/DAEMONSET; found 'just-a-name'"):
        DaemonSetProbe("just-a-name", kubeconfig=str(kube_cluster.kubeconfig()))


async def _sidecar(
    base: Path, kubeconfig: Path, ref: str, *, delete: Any, close_after: float
) -> tuple[int, str, list[api.UpdateContainersRequest], float | None, float | None]:
    """Run the reset container's command; SIGTERM it; close the 'daemon' port later.

    Returns exit status, output, the runtime's update requests, when the port closed and
    when the first update arrived (monotonic times).
    """
    sysfs = base / "host"
    write_sysfs(MACHINE, sysfs)
    web = pod("web", QoSClass.BURSTABLE)
    pinned = ctr(web, "app", cpu="500m", cpus="0,3-4,7", state=RUNNING)
    sock = str(base / "nri.sock")
    rt = FakeRuntime(pods=[web], containers=[pinned])
    await rt.listen(sock)
    daemon_port = socket.socket()
    daemon_port.bind(("127.0.0.1", 0))
    daemon_port.listen()
    port = daemon_port.getsockname()[1]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "nri_resmgr.cli",
        "reset",
        "--on-uninstall",
        ref,
        "--kubeconfig",
        str(kubeconfig),
        f"--wait-port=127.0.0.1:{port}",
        "--socket",
        sock,
        "--sysfs-root",
        str(sysfs),
        "--state-dir",
        str(base / "state"),
        "--timeout",
        "20",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.stdout is not None
    first = await asyncio.wait_for(proc.stdout.readline(), 30)
    assert b"waiting for SIGTERM" in first
    delete()
    proc.send_signal(signal.SIGTERM)
    await asyncio.sleep(close_after)
    closed_at: float | None = None
    if rt.update_requests == []:
        daemon_port.close()
        closed_at = time.monotonic()
    updated_at: float | None = None
    try:
        await rt.next_update(timeout=5)
        updated_at = time.monotonic()
    except TimeoutError:
        pass
    out = await asyncio.wait_for(proc.stdout.read(), 30)
    code = await asyncio.wait_for(proc.wait(), 30)
    daemon_port.close()
    await rt.close()
    return code, first.decode() + out.decode(), rt.update_requests, closed_at, updated_at


def test_uninstall_resets_after_the_daemon_port_closed(kube_cluster: Cluster, ds_name: str) -> None:
    base = Path(tempfile.mkdtemp(prefix="nri-", dir="/tmp"))
    code, out, requests, closed_at, updated_at = asyncio.run(
        _sidecar(
            base,
            kube_cluster.kubeconfig(),
            f"default/{ds_name}",
            delete=lambda: _delete(kube_cluster, ds_name, "Background"),
            close_after=1.0,
        )
    )
    assert code == 0, out
    assert "SIGTERM: the DaemonSet is gone (uninstalled)" in out
    assert "reset pod default/web container app (web-app): cpus 0,3-4,7 -> 0-7" in out
    (request,) = requests
    assert [(u.container_id, u.linux.resources.cpu.cpus) for u in request.update] == [
        ("web-app", "0-7")
    ]
    # nothing went out while the daemon still listened
    assert closed_at is not None and updated_at is not None and updated_at >= closed_at


def test_a_restart_leaves_every_container_alone(kube_cluster: Cluster, ds_name: str) -> None:
    base = Path(tempfile.mkdtemp(prefix="nri-", dir="/tmp"))
    code, out, requests, _, _ = asyncio.run(
        _sidecar(
            base,
            kube_cluster.kubeconfig(),
            f"default/{ds_name}",
            delete=lambda: None,
            close_after=0.5,
        )
    )
    assert code == 0, out
    assert f"SIGTERM: DaemonSet default/{ds_name} still exists: a restart" in out
    assert "containers left to the next daemon" in out
    assert requests == []


def test_an_unreachable_api_resets_nothing_and_says_so(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: t\n"
        "clusters: [{name: t, cluster: {server: 'http://127.0.0.1:1'}}]\n"
        "users: [{name: t, user: {token: x}}]\n"
        "contexts: [{name: t, context: {cluster: t, user: t}}]\n"
    )
    write_sysfs(MACHINE, tmp_path / "host")
    proc = subprocess.Popen(
        [sys.executable, "-m", "nri_resmgr.cli", "reset", "--on-uninstall", "kube-system/x",
         "--kubeconfig", str(kubeconfig), "--sysfs-root", str(tmp_path / "host"),
         "--socket", str(tmp_path / "never-used.sock")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert proc.stdout is not None
    lines: list[str] = []
    while not any("waiting for SIGTERM" in ln for ln in lines):
        line = proc.stdout.readline()
        assert line, "".join(lines)
        lines.append(line)
    proc.send_signal(signal.SIGTERM)
    out = "".join(lines) + proc.stdout.read()
    assert proc.wait(timeout=30) == 1, out
    assert "expected to read it at start-up; found" in out
    assert "SIGTERM: cannot tell an uninstall from a restart: the API answered 0" in out
    assert "nothing reset" in out


async def _hook_and_sidecar(
    base: Path, kubeconfig: Path, ref: str, *, delete: Any
) -> tuple[int, str, int, str, list[api.UpdateContainersRequest], str]:
    """The chart's pair: the container's main process records the DaemonSet's UID in the
    hand-off dir and waits; the preStop hook (`--prestop`) judges and resets before any
    SIGTERM; then SIGTERM makes the main process print the hook's report.

    Returns the hook's status and output, the main process's, the runtime's update
    requests and the recorded UID.
    """
    sysfs = base / "host"
    write_sysfs(MACHINE, sysfs)
    web = pod("web", QoSClass.BURSTABLE)
    pinned = ctr(web, "app", cpu="500m", cpus="0,3-4,7", state=RUNNING)
    sock = str(base / "nri.sock")
    rt = FakeRuntime(pods=[web], containers=[pinned])
    await rt.listen(sock)
    handoff = base / "handoff"
    handoff.mkdir()
    common = [
        sys.executable, "-m", "nri_resmgr.cli", "reset", "--on-uninstall", ref,
        "--kubeconfig", str(kubeconfig), f"--handoff-dir={handoff}",
        "--wait-port=127.0.0.1:1", "--socket", sock, "--sysfs-root", str(sysfs),
        "--state-dir", str(base / "state"), "--timeout", "20",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    main = await asyncio.create_subprocess_exec(
        *common, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env
    )
    assert main.stdout is not None
    first = await asyncio.wait_for(main.stdout.readline(), 30)
    assert b"waiting for SIGTERM" in first
    uid = (handoff / "started-uid").read_text()
    delete()
    hook = await asyncio.create_subprocess_exec(
        *common, "--prestop", stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT, env=env,
    )  # fmt: skip
    hook_out, _ = await asyncio.wait_for(hook.communicate(), 60)
    hook_code = await hook.wait()
    main.send_signal(signal.SIGTERM)
    main_out = await asyncio.wait_for(main.stdout.read(), 30)
    main_code = await asyncio.wait_for(main.wait(), 30)
    await rt.close()
    return (hook_code, hook_out.decode(), main_code, first.decode() + main_out.decode(),
            rt.update_requests, uid)  # fmt: skip


def test_the_prestop_hook_resets_and_the_main_process_reports_it(
    kube_cluster: Cluster, ds_name: str
) -> None:
    base = Path(tempfile.mkdtemp(prefix="nri-", dir="/tmp"))
    uid = kube_cluster.client.request(
        "GET", f"/apis/apps/v1/namespaces/default/daemonsets/{ds_name}"
    )["metadata"]["uid"]
    hook_code, hook_out, main_code, main_out, requests, recorded = asyncio.run(
        _hook_and_sidecar(
            base,
            kube_cluster.kubeconfig(),
            f"default/{ds_name}",
            delete=lambda: _delete(kube_cluster, ds_name, "Background"),
        )
    )
    assert recorded == uid
    assert hook_code == 0, hook_out
    assert "preStop: the DaemonSet is gone (uninstalled)" in hook_out
    assert "reset pod default/web container app (web-app): cpus 0,3-4,7 -> 0-7" in hook_out
    # one reset, by the hook; the main process only prints its report
    (request,) = requests
    assert [(u.container_id, u.linux.resources.cpu.cpus) for u in request.update] == [
        ("web-app", "0-7")
    ]
    assert main_code == 0, main_out
    assert "SIGTERM: the preStop hook judged already:" in main_out
    assert "reset pod default/web container app (web-app)" in main_out
    assert "exit status 0" in main_out


def test_the_prestop_hook_leaves_everything_on_a_restart(
    kube_cluster: Cluster, ds_name: str
) -> None:
    base = Path(tempfile.mkdtemp(prefix="nri-", dir="/tmp"))
    hook_code, hook_out, main_code, main_out, requests, _ = asyncio.run(
        _hook_and_sidecar(
            base, kube_cluster.kubeconfig(), f"default/{ds_name}", delete=lambda: None
        )
    )
    assert hook_code == 0, hook_out
    assert f"preStop: DaemonSet default/{ds_name} still exists: a restart" in hook_out
    assert requests == []
    assert main_code == 0 and "containers left to the next daemon" in main_out, main_out
