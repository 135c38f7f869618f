"""Pod-level resctrl groups through the daemon: created at RunPodSandbox, gone at
RemovePodSandbox, and after a restart exactly the groups that live pods need remain; with
``monitorPods`` container tasks enter monitoring groups and their counters reach /metrics.

The daemon plugin runs in-process against `nri_api.testing.FakeRuntime` over a real Unix
socket, managing a synthetic Intel resctrl tree (11-bit L3 masks on two cache ids, MBA).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nri_api.testing import FakeRuntime
from nri_resmgr.control.synthetic import INTEL_SKX, make_resctrl_tree
from nri_resmgr.model import QoSClass
from nri_resmgr.ops.metrics import serve_http
from nri_resmgr.runtime.daemon import ResmgrPlugin
from nri_resmgr.topology.model import Topology
from tests.support.daemon import http_get, start_daemon, stop_daemon
from tests.support.messages import ctr, guaranteed, pod
from tests.support.requirements import REPO

ANNOTATION = "node.koordinator.sh/resctrl"
SPEC = json.dumps({"llc": {"schemata": {"range": [20, 80]}}, "mb": {"schemata": {"percent": 20}}})
CONFIG = {
    "policy": "static",
    "policyConfig": {"reservedSystemCPUs": "0"},
    "control": {
        "rdt": {
            "enable": True,
            "partitions": {
                "all": {"l3Allocation": "100%", "classes": {"gold": {"l3Allocation": "50-100%"}}}
            },
        }
    },
}


def groups(root: Path) -> set[str]:
    return {
        p.name
        for p in root.iterdir()
        if p.is_dir() and p.name not in ("info", "mon_groups", "mon_data")
    }


async def _session(
    topo: Topology,
    root: Path,
    state: Path,
    sock: str,
    config: dict[str, Any] = CONFIG,
    **rt_kw: object,
) -> tuple[FakeRuntime, ResmgrPlugin, asyncio.Task[int]]:
    return await start_daemon(
        sock, config, topo, rt_kw=rt_kw, resctrl_root=str(root), state_dir=str(state)
    )


def test_pod_groups_follow_pod_lifetime_and_survive_restart(topology: Topology) -> None:
    base = Path(tempfile.mkdtemp(prefix="nri-", dir="/tmp"))
    root, state, sock = base / "resctrl", base / "state", str(base / "nri.sock")
    make_resctrl_tree(root, INTEL_SKX)
    foreign = root / "someone-elses"
    foreign.mkdir()

    async def scenario() -> None:
        rt, plugin, task = await _session(topology, root, state, sock)
        a = pod("a", QoSClass.GUARANTEED)
        a.annotations[ANNOTATION] = SPEC
        b = pod("b", QoSClass.BURSTABLE)
        b.annotations[ANNOTATION] = SPEC
        group_a = f"nri-resmgr-pod-{a.uid}"
        group_b = f"nri-resmgr-pod-{b.uid}"
        assert group_a not in groups(root)
        await rt.run_pod_sandbox(a)
        await rt.run_pod_sandbox(b)
        assert {group_a, group_b} <= groups(root)
        schemata = (root / group_a / "schemata").read_text()
        assert "MB:0=20;1=20" in schemata
        reply = await rt.create_container(a, guaranteed(a, "app", "2"))
        assert reply.adjust.linux.resources.rdt_class.value == group_a
        # the daemon dies; pod b goes away while it is down
        await stop_daemon(rt, plugin, task)
        app = guaranteed(a, "app", "2", cpus="1,5", state=3)
        rt, plugin, task = await _session(topology, root, state, sock, pods=[a], containers=[app])
        assert group_a in groups(root)
        assert group_b not in groups(root)  # no live pod needs it: removed at Synchronize
        assert foreign.exists()  # never ours: never touched
        await rt.remove_pod_sandbox(a)
        assert group_a not in groups(root)
        assert "gold" in groups(root)  # class groups stay
        other = pod("c", QoSClass.BEST_EFFORT)
        await rt.run_pod_sandbox(other)
        await rt.create_container(other, ctr(other, "x"))
        assert not any(g.startswith("nri-resmgr-pod-") for g in groups(root))
        await stop_daemon(rt, plugin, task)

    try:
        asyncio.run(asyncio.wait_for(scenario(), 60))
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_daemon_process_runs_on_with_an_unwritable_state_dir(tmp_path: Path) -> None:
    """`nri-resmgr run` with RDT on and a state directory it cannot write (here below a
    regular file; read-only and full directories take the same path, see
    tests/unit/resmgr/test_resctrl_state.py): one clear log line, no traceback, and a
    daemon that registers and manages pod groups."""
    root = tmp_path / "resctrl"
    make_resctrl_tree(root, INTEL_SKX)
    (tmp_path / "file").write_text("not a directory\n")
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**CONFIG, "log": {"format": "json"}}))
    sock = str(tmp_path / "nri.sock")
    stderr = tmp_path / "stderr"

    async def scenario() -> None:
        rt = FakeRuntime()
        await rt.listen(sock)
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "nri_resmgr.cli",
                "run",
                "--socket",
                sock,
                "--config",
                str(config),
                "--topology",
                "packages=1,nodes=1,cores=4,threads=2",
                "--resctrl-root",
                str(root),
                "--state-dir",
                str(tmp_path / "file" / "state"),
            ],
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr.open("wb"),
        )
        try:
            await rt.wait_ready(timeout=30)
            a = pod("a", QoSClass.BURSTABLE)
            a.annotations[ANNOTATION] = SPEC
            await rt.run_pod_sandbox(a)
            assert f"nri-resmgr-pod-{a.uid}" in groups(root)
            await rt.remove_pod_sandbox(a)
            assert f"nri-resmgr-pod-{a.uid}" not in groups(root)
            assert proc.poll() is None
        finally:
            proc.send_signal(signal.SIGTERM)
            code = await asyncio.get_running_loop().run_in_executor(None, proc.wait, 30)
            await rt.close()
        text = stderr.read_text()
        assert code == 0, text
        assert "Traceback" not in text
        lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
        warned = [
            e
            for e in lines
            if e.get("event", "").startswith("resctrl ownership record not writable")
        ]
        assert len(warned) == 1, text
        assert "Not a directory" in warned[0]["error"]

    asyncio.run(asyncio.wait_for(scenario(), 90))


MONITORED: dict[str, Any] = json.loads(json.dumps(CONFIG))
MONITORED["control"]["rdt"]["monitorPods"] = True
GAUGES = ("nri_l3_llc_occupancy", "nri_l3_mbm_local_bytes", "nri_l3_mbm_total_bytes")


def _counters(group: Path, base: int) -> None:
    """What the kernel would show in a group's mon_data (a synthetic tree has none)."""
    for cid in (0, 1):
        d = group / "mon_data" / f"mon_L3_{cid:02d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / "llc_occupancy").write_text(f"{base + cid}\n")
        (d / "mbm_local_bytes").write_text(f"{base + 10 + cid}\n")
        (d / "mbm_total_bytes").write_text(f"{base + 20 + cid}\n")


def _rdt_gauges(body: bytes) -> dict[tuple[str, str, str, str], float]:
    out = {}
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            if s.name in GAUGES:
                lb = s.labels
                out[(s.name, lb["rdt_class"], lb["rdt_mon_group"], lb["cache_id"])] = s.value
    return out


@pytest.mark.parametrize(
    ("nri_version", "by_runtime"),
    [("v0.12.2", True), ("v0.11.0", True), ("v0.10.0", False)],
    ids=["nri-0.12.2-linuxrdt", "nri-0.11.0-linuxrdt", "nri-0.10.0-pid"],
)
def test_monitored_pods_reach_metrics_and_go_with_the_pod(
    topology: Topology, tmp_path: Path, nri_version: str, by_runtime: bool
) -> None:
    """A container of class gold in a monitored pod: with NRI v0.11+ its adjustment asks
    the runtime for a monitoring group (LinuxRdt closID + enableMonitoring) and the daemon
    makes none; before v0.11 the daemon makes the pod's monitoring group and writes the
    task's PID into it at PostStartContainer.  Either way its counters reach the real
    /metrics endpoint, and the pod's groups go with RemovePodSandbox."""
    root, state, sock = tmp_path / "resctrl", tmp_path / "state", str(tmp_path / "nri.sock")
    make_resctrl_tree(root, INTEL_SKX)

    async def scenario() -> None:
        rt, plugin, task = await _session(
            topology, root, state, sock, MONITORED, nri_version=nri_version
        )
        server = await serve_http(plugin.metrics, plugin.health, host="127.0.0.1", port=0)
        port = server.sockets[0].getsockname()[1]
        try:
            web = pod("web", QoSClass.BURSTABLE)
            web.annotations["rdtclass.resource-policy.nri.io"] = "gold"
            app = ctr(web, "app", cpu="500m")
            await rt.run_pod_sandbox(web)
            reply = await rt.create_container(web, app)
            pod_mon = root / "gold" / "mon_groups" / f"nri-resmgr-pod-{web.uid}"
            runtime_mon = root / "gold" / "mon_groups" / app.id
            rdt = reply.adjust.linux.rdt
            assert reply.adjust.linux.resources.rdt_class.value == "gold"
            if by_runtime:
                assert rdt.clos_id.value == "gold" and rdt.enable_monitoring.value
                assert not pod_mon.exists()
                # what runc 1.4 / crun do for enableMonitoring, before the task runs
                runtime_mon.mkdir(parents=True)
                (runtime_mon / "tasks").write_text("4242\n")
                counted, label = runtime_mon, app.id
            else:
                assert not reply.adjust.linux.HasField("rdt")
                assert pod_mon.is_dir()
                counted, label = pod_mon, f"nri-resmgr-pod-{web.uid}"
            app.pid = 4242
            app.state = 3  # type: ignore[assignment]
            await rt.post_start_container(web, app)
            assert (counted / "tasks").read_text().split() == ["4242"]
            assert not (pod_mon.exists() and by_runtime)
            _counters(counted, 1000)
            _counters(root / "gold", 5000)
            status, body = await http_get(port, "/metrics")
            assert status == 200
            got = _rdt_gauges(body)
            for cid in ("0", "1"):
                c = int(cid)
                assert got[("nri_l3_llc_occupancy", "gold", label, cid)] == 1000 + c
                assert got[("nri_l3_mbm_local_bytes", "gold", label, cid)] == 1010 + c
                assert got[("nri_l3_mbm_total_bytes", "gold", label, cid)] == 1020 + c
                assert got[("nri_l3_llc_occupancy", "gold", "", cid)] == 5000 + c
            await rt.remove_container(web, app)
            if by_runtime:
                shutil.rmtree(runtime_mon)  # the runtime removes its group with the container
            await rt.remove_pod_sandbox(web)
            assert not pod_mon.exists()
            assert not list((root / "gold" / "mon_groups").iterdir())
            got = _rdt_gauges((await http_get(port, "/metrics"))[1])
            assert {k[2] for k in got} == {""}  # only gold's own counters are left
        finally:
            server.close()
            await server.wait_closed()
            await stop_daemon(rt, plugin, task)

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_runtime_that_ignores_enable_monitoring_gets_the_pid_written(
    topology: Topology, tmp_path: Path
) -> None:
    """NRI v0.11+ passes LinuxRdt on, but an OCI runtime without enableMonitoring (runc
    before 1.4) makes no group: at PostStartContainer the daemon sees the task is not in
    one and writes its PID into the pod's monitoring group."""
    root, state, sock = tmp_path / "resctrl", tmp_path / "state", str(tmp_path / "nri.sock")
    make_resctrl_tree(root, INTEL_SKX)

    async def scenario() -> None:
        rt, plugin, task = await _session(
            topology, root, state, sock, MONITORED, nri_version="v0.12.2"
        )
        try:
            web = pod("web", QoSClass.BURSTABLE)
            web.annotations["rdtclass.resource-policy.nri.io"] = "gold"
            app = ctr(web, "app", cpu="500m")
            await rt.run_pod_sandbox(web)
            reply = await rt.create_container(web, app)
            assert reply.adjust.linux.rdt.enable_monitoring.value
            app.pid = 777
            await rt.post_start_container(web, app)
            pod_mon = root / "gold" / "mon_groups" / f"nri-resmgr-pod-{web.uid}"
            assert (pod_mon / "tasks").read_text().split() == ["777"]
            await rt.remove_pod_sandbox(web)
            assert not pod_mon.exists()
        finally:
            await stop_daemon(rt, plugin, task)

    asyncio.run(asyncio.wait_for(scenario(), 60))
