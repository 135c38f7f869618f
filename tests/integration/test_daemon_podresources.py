"""The kubelet's devices through the daemon: a container whose GPU the (fake) kubelet put
on NUMA node 2 is placed there by topology-aware; a missing or hanging kubelet socket
leaves containers placed as without it, in bounded time.

The daemon plugin runs in-process against `nri_api.testing.FakeRuntime` over a real unix
socket, the kubelet is `tests.support.podresources.fake_kubelet` on another, the machine
their n4c16 (four NUMA nodes of four CPUs) written as a synthetic sysfs.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from nri_resmgr.kube.podresources import PodResourcesCache, PodResourcesClient
from nri_resmgr.model import QoSClass
from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.discover import discover
from nri_resmgr.topology.synthetic import write_sysfs
from tests.parity.machines import N4C16
from tests.support.daemon import start_daemon, stop_daemon
from tests.support.logs import CapturedLog
from tests.support.messages import guaranteed, pod
from tests.support.podresources import fake_kubelet, pod_resources

CONFIG = {
    "policy": "topology-aware",
    "policyConfig": {"reservedResources": {"cpu": "1000m"}},
}
GPU = "vendor.com/gpu"


@pytest.fixture
def short_dir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="podres-", dir="/tmp"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def placed(kubelet: str, short: Path, tmp_path: Path, log: CapturedLog) -> IDSet:
    """The CPUs of pod ``trainer``'s container ``c0`` (2 CPUs, Guaranteed), with the
    kubelet's socket at `kubelet`."""
    root = tmp_path / "root"
    write_sysfs(N4C16, root)
    topology = discover(root)

    async def scenario() -> IDSet:
        rt, plugin, task = await start_daemon(
            str(short / "nri.sock"), CONFIG, topology, sysfs_root=str(root)
        )
        client = PodResourcesClient(kubelet, get_timeout=0.5, log=log.log)
        plugin.kubelet_devices = PodResourcesCache(client, sys_root=str(root))
        p = pod("trainer", QoSClass.GUARANTEED)
        await rt.run_pod_sandbox(p)
        reply = await rt.create_container(p, guaranteed(p, "c0", "2"))
        await stop_daemon(rt, plugin, task)
        client.close()
        return IDSet.parse(reply.adjust.linux.resources.cpu.cpus)

    return asyncio.run(scenario())


def test_kubelet_device_numa_node_places_the_container(short_dir: Path, tmp_path: Path) -> None:
    sock = short_dir / "kubelet.sock"
    trainer = pod_resources("default", "trainer", {"c0": {GPU: (["gpu-7"], [2])}})
    with fake_kubelet(sock, [trainer]) as calls:
        cpus = placed(str(sock), short_dir, tmp_path, CapturedLog())
    assert calls == ["Get"]
    assert len(cpus) == 2 and cpus <= IDSet.parse("8-11")  # node 2's CPUs


@pytest.mark.parametrize("kind", ["missing", "hang"])
def test_without_an_answer_the_container_is_placed_in_bounded_time(
    short_dir: Path, tmp_path: Path, kind: str
) -> None:
    sock = short_dir / "kubelet.sock"
    trainer = pod_resources("default", "trainer", {"c0": {GPU: (["gpu-7"], [2])}})
    log = CapturedLog()
    with contextlib.ExitStack() as stack:
        if kind == "hang":
            stack.enter_context(fake_kubelet(sock, [trainer], behaviour="hang"))
        cpus = placed(str(sock), short_dir, tmp_path, log)
    assert len(cpus) == 2  # placed as without the kubelet; the log says which path ran
    if kind == "hang":
        assert (
            "expected a reply within 0.5 s"
            in log.events("pod devices from the kubelet not used")[0]["error"]
        )
    else:
        assert log.lines[0]["state"] == "missing"
