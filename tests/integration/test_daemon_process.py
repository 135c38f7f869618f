"""`nri-resmgr run` as a pre-registered plugin process, against the in-project runtime peer.

The runtime starts a pre-registered plugin with the socket on fd 3, an environment of
exactly NRI_PLUGIN_NAME, NRI_PLUGIN_IDX and NRI_PLUGIN_SOCKET=3 (no PATH), stdout and
stderr discarded, and its conf.d file's content in Configure.  This test does the same
with a socket pair: the configuration (policy, log file) arrives only through Configure.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from nri_api import api
from nri_api.errors import RPCError
from nri_api.testing import FakeRuntime
from tests.support.requirements import REPO


def test_preregistered_daemon_process(tmp_path: Path) -> None:
    log_file = tmp_path / "resmgr.log"
    config = json.dumps({
        "policy": "static",
        "policyConfig": {"reservedSystemCPUs": "0"},
        "log": {"file": str(log_file), "format": "json"},
    })

    async def scenario() -> None:
        rt = FakeRuntime(config=config)
        theirs = await rt.socketpair()
        fd = theirs.fileno()

        def to_fd3() -> None:
            os.dup2(fd, 3)

        proc = subprocess.Popen(
            [sys.executable, "-m", "nri_resmgr.cli", "run",
             "--topology", "packages=1,nodes=1,cores=4,threads=2",
             "--state-dir", tempfile.mkdtemp(dir=tmp_path)],
            env={"NRI_PLUGIN_NAME": "resmgr", "NRI_PLUGIN_IDX": "90", "NRI_PLUGIN_SOCKET": "3"},
            cwd=REPO,
            pass_fds=(fd, 3),  # 3 too: close_fds runs after preexec_fn
            preexec_fn=to_fd3,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=open(tmp_path / "stderr", "wb"),  # noqa: SIM115
        )
        theirs.close()
        try:
            handshake = await rt.wait_ready(timeout=30)
            assert handshake.registration.plugin_name == "resmgr"
            assert handshake.registration.plugin_idx == "90"
            assert handshake.sync_updates == ()
            pod = api.PodSandbox(id="sb", name="db", uid="u1", namespace="default")
            pod.linux.cgroup_parent = "kubepods-podu1.slice"
            ctr = api.Container(id="c1", pod_sandbox_id="sb", name="pg")
            ctr.linux.cgroups_path = "kubepods-podu1.slice:cri-containerd:c1"
            res = ctr.linux.resources
            res.cpu.shares.value = 2048
            res.cpu.shares.SetInParent()
            res.cpu.quota.value = 200000
            res.cpu.quota.SetInParent()
            res.cpu.period.value = 100000
            res.cpu.period.SetInParent()
            res.memory.limit.value = 1 << 30
            res.memory.limit.SetInParent()
            # SIGHUP killed the daemon without a word: now it is logged and ignored
            proc.send_signal(signal.SIGHUP)
            # a hostile cpuset fails that one request at once (was 2-3.7 s and 870 MiB)
            hostile = api.Container()
            hostile.CopyFrom(ctr)
            hostile.linux.resources.cpu.cpus = "0-9999999"
            loop = asyncio.get_running_loop()
            start = loop.time()
            with pytest.raises(RPCError) as err:
                await rt.create_container(pod, hostile)
            assert loop.time() - start < 1.0
            assert err.value.message.startswith(
                "pod default/db container pg: cpuset.cpus '0-9999999' is not a kernel id list"
            )
            reply = await rt.create_container(pod, ctr)
            # the static policy from the Configure string, not the default topology-aware
            assert reply.adjust.linux.resources.cpu.cpus == "1,5"
            assert proc.poll() is None
        finally:
            proc.send_signal(signal.SIGTERM)
            code = await asyncio.get_running_loop().run_in_executor(None, proc.wait, 30)
            await rt.close()
        assert code == 0
        lines = [json.loads(line) for line in log_file.read_text().splitlines()]
        creates = [e for e in lines if e.get("event") == "create"]
        assert [(e["container"], e["cpus"], e["kind"]) for e in creates] == [
            ("default/db/pg", "1,5", "exclusive")
        ]
        assert [e["event"] for e in lines if "SIGHUP" in e.get("event", "")] == [
            "SIGHUP ignored: the configuration is not reloaded on a signal; restart the "
            "daemon to read --config again (a ConfigMap or CRD configuration is applied live)"
        ]

    asyncio.run(asyncio.wait_for(scenario(), 90))


def test_a_socket_path_beyond_the_unix_limit_is_refused_at_start(tmp_path: Path) -> None:
    # was retried forever; now a clear error and the configuration-error exit status
    path = "/tmp/" + "d" * 120 + "/nri.sock"
    proc = subprocess.run(
        [sys.executable, "-m", "nri_resmgr.cli", "run", "--socket", path,
         "--topology", "packages=1,nodes=1,cores=2,threads=1",
         "--state-dir", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=60,
        env={**os.environ, "NRI_PLUGIN_SOCKET": ""},
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith(
        "nri-resmgr run: NRI socket path: expected at most 108 bytes (the Unix socket path "
        "limit), found 134"
    )
