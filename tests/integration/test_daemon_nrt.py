"""The daemon's NodeResourceTopology on a real kube-apiserver: soon after each decision,
the NUMA zone's `available` is what the grant leaves, and the API server keeps the
object whole (its CRD prunes nothing we write).

The daemon runs in-process against `nri_api.testing.FakeRuntime` over a real Unix socket,
on a synthetic machine of two NUMA nodes (CPUs 0-3 and 4-7, 2G each), with the
topology-aware policy and CPU 0 reserved.  The report interval is long (60 s): only the
change itself can make the report follow.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from nri_api.stub import OnClose
from nri_resmgr.config import config_from_mapping
from nri_resmgr.kube.agent import build_kube_side
from nri_resmgr.kube.fingerprint import pods_fingerprint
from nri_resmgr.kube.report import NRT_PATH
from nri_resmgr.model import QoSClass
from nri_resmgr.ops.logs import get_logger
from nri_resmgr.runtime.daemon import ResmgrPlugin
from nri_resmgr.runtime.process import DaemonOptions
from nri_resmgr.topology.cpuset import CPUSet
from nri_resmgr.topology.discover import discover
from nri_resmgr.topology.model import Topology
from nri_resmgr.topology.synthetic import write_sysfs
from tests.k8s.cluster import Cluster
from tests.support.daemon import kube_side_serving
from tests.support.messages import guaranteed, pod

NODE = "worker-nrt"
SPEC = {"packages": 1, "nodes": 2, "cores": 4, "threads": 1, "memory": "2G"}


@pytest.fixture(scope="module")
def machine() -> Topology:
    root = Path(tempfile.mkdtemp(prefix="nri-sysfs-"))
    try:
        write_sysfs(SPEC, root)
        return discover(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster(kube_cluster: Cluster) -> Cluster:
    kube_cluster.client.request("POST", "/api/v1/nodes", body={
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})  # fmt: skip
    return kube_cluster


def _cpu_memory(obj: dict[str, Any]) -> dict[str, tuple[int, int, int, int]]:
    """Per NUMA zone: cpu allocatable and available, memory allocatable and available."""
    out = {}
    for z in obj.get("zones", []):
        if z["type"] != "Node":
            continue
        r = {x["name"]: x for x in z["resources"]}
        out[z["name"]] = (
            int(r["cpu"]["allocatable"]), int(r["cpu"]["available"]),
            int(r["memory"]["allocatable"]), int(r["memory"]["available"]),
        )  # fmt: skip
    return out


def test_the_report_follows_each_decision(cluster: Cluster, machine: Topology) -> None:
    client = cluster.client
    plugin_dir = Path(tempfile.mkdtemp(prefix="nri-", dir="/tmp"))
    sock = str(plugin_dir / "nri.sock")
    config = config_from_mapping(
        {"policy": "topology-aware", "policyConfig": {"reservedResources": {"cpu": "cpuset:0"}}},
        source="test",
    )
    plugin = ResmgrPlugin(config=config, topology=machine, name="resmgr", idx="90",
                          socket_path=sock, on_close=OnClose.EXIT)  # fmt: skip
    options = DaemonOptions(node_name=NODE, namespace="default",
                            kubeconfig=str(cluster.kubeconfig()),
                            node_resource_topology=True, report_interval=60)  # fmt: skip
    side = build_kube_side(plugin, options, log=get_logger("test"))
    assert side is not None
    manager = side.manager
    assert manager is not None
    delays: list[float] = []

    def report() -> dict[str, Any]:
        try:
            return client.request("GET", f"{NRT_PATH}/{NODE}")
        except Exception:
            return {}

    async def until(pred: Any) -> dict[str, Any]:
        start = time.monotonic()
        while time.monotonic() - start < 30:
            got = report()
            if pred(got):
                delays.append(time.monotonic() - start)
                return got
            await asyncio.sleep(0.05)
        raise AssertionError(f"report not updated in 30 s: {_cpu_memory(report())}")

    async def scenario() -> None:
        async with kube_side_serving(plugin, side, plugin_dir) as rt:
            idle = {"node-0": (3, 3, 2 << 30, 2 << 30), "node-1": (4, 4, 2 << 30, 2 << 30)}
            await until(lambda got: _cpu_memory(got) == idle)
            db = pod("db", QoSClass.GUARANTEED)
            await rt.run_pod_sandbox(db)
            pg = guaranteed(db, "pg", "2")
            reply = await rt.create_container(db, pg)
            cpus = CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)
            (node,) = {machine.cpu(c).node_id for c in cpus}
            zone = f"node-{node}"
            alloc = idle[zone][0]
            want = (alloc, alloc - 2, 2 << 30, (2 << 30) - 100 * 10**6)
            got = await until(lambda got: _cpu_memory(got).get(zone) == want)
            attrs = {a["name"]: a["value"] for a in got["attributes"]}
            assert attrs["nodeTopologyPodsFingerprint"] == pods_fingerprint([("default", "db")])
            assert attrs["topologyManagerPolicy"] == "best-effort"
            # the API server kept every field we wrote (its schema pruned nothing)
            written = manager.collect()
            for key in ("zones", "attributes", "topologyPolicies"):
                assert got[key] == written[key], key

            await rt.remove_container(db, pg)
            await rt.remove_pod_sandbox(db)
            got = await until(lambda got: _cpu_memory(got) == idle)
            attrs = {a["name"]: a["value"] for a in got["attributes"]}
            assert attrs["nodeTopologyPodsFingerprint"] == pods_fingerprint([])

    asyncio.run(asyncio.wait_for(scenario(), 120))
    print(f"report delays after each step (s): {[round(d, 2) for d in delays]}")
