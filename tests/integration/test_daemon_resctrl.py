"""Pod-level resctrl groups through the daemon: created at RunPodSandbox, gone at
RemovePodSandbox, and after a restart exactly the groups that live pods need remain.

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

from nri_api.stub import OnClose
from nri_api.testing import FakeRuntime
from nri_resmgr.config import config_from_mapping
from nri_resmgr.control.synthetic import INTEL_SKX, make_resctrl_tree
from nri_resmgr.daemon import ResmgrPlugin
from nri_resmgr.model import QoSClass
from nri_resmgr.topology.model import Topology
from tests._support import REPO
from tests.integration.test_daemon import ctr, guaranteed, pod
from tests.integration.test_daemon import topology as topology

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
    topo: Topology, root: Path, state: Path, sock: str, **rt_kw: object
) -> tuple[FakeRuntime, ResmgrPlugin, asyncio.Task[int]]:
    rt = FakeRuntime(**rt_kw)  # type: ignore[arg-type]
    await rt.listen(sock)
    plugin = ResmgrPlugin(
        config=config_from_mapping(CONFIG),
        topology=topo,
        resctrl_root=str(root),
        state_dir=str(state),
        name="resmgr",
        idx="90",
        socket_path=sock,
        on_close=OnClose.EXIT,
    )
    task = asyncio.create_task(plugin.serve())
    await rt.wait_ready()
    return rt, plugin, task


async def _end(rt: FakeRuntime, plugin: ResmgrPlugin, task: asyncio.Task[int]) -> None:
    await plugin.stop()
    await asyncio.wait_for(task, 10)
    await rt.close()


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
        await _end(rt, plugin, task)
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
        await _end(rt, plugin, task)

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
