"""The daemon's Kubernetes side on a real kube-apiserver: live reload and the node report.

The daemon plugin runs in-process against `nri_api.testing.FakeRuntime` over a real Unix
socket (the machine: 1 package, 4 cores x 2 threads, CPUs 0-7, n and n+4 siblings), and
its KubeSide talks to a real kube-apiserver with etcd.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import pytest

from nri_api.stub import OnClose
from nri_resmgr.config import Config
from nri_resmgr.kube.agent import build_kube_side
from nri_resmgr.kube.report import NRT_PATH
from nri_resmgr.model import QoSClass
from nri_resmgr.ops.logs import get_logger
from nri_resmgr.runtime.process import DaemonOptions
from nri_resmgr.topology.cpuset import CPUSet
from nri_resmgr.topology.model import Topology
from tests.k8s.cluster import Cluster
from tests.support.daemon import kube_side_serving, resmgr_plugin
from tests.support.messages import guaranteed, pod
from tests.support.requirements import REPO
from tests.support.waiting import wait_until

NS = "daemon-kube-test"  # its own namespace: the session cluster is shared
NODE = "worker-7"
CRD = REPO / "charts" / "nri-resmgr" / "crds" / "noderesourcetopologies.yaml"
CM = f"/api/v1/namespaces/{NS}/configmaps"


@pytest.fixture(scope="module")
def cluster(kube_cluster: Cluster) -> Cluster:
    kube_cluster.client.request("POST", "/api/v1/nodes", body={
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
    kube_cluster.client.request("POST", "/api/v1/namespaces", body={
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    return kube_cluster


def _configmap(name: str, text: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
            "data": {"config.yaml": text}}


def test_live_reload_moves_containers_and_report_is_read_back(
    cluster: Cluster, topology: Topology
) -> None:
    client = cluster.client
    client.request("POST", CM, body=_configmap(
        "nri-resmgr-config.default", "policy: static\npolicyConfig: {reservedSystemCPUs: '0'}\n"))
    plugin_dir = Path(tempfile.mkdtemp(prefix="nri-", dir="/tmp"))
    sock = str(plugin_dir / "nri.sock")
    plugin = resmgr_plugin(Config(), topology, socket_path=sock, on_close=OnClose.EXIT)
    options = DaemonOptions(node_name=NODE, namespace=NS, kubeconfig=str(cluster.kubeconfig()),
                            node_resource_topology=True, report_interval=0.3)
    side = build_kube_side(plugin, options, log=get_logger("test"))
    assert side is not None
    # the cluster's document is in force before the runtime connects
    assert plugin.config.policy == "static"

    async def scenario() -> None:
        async with kube_side_serving(plugin, side, plugin_dir) as rt:
            db = pod("db", QoSClass.GUARANTEED)
            await rt.run_pod_sandbox(db)
            reply = await rt.create_container(db, guaranteed(db, "pg", "2"))
            assert reply.adjust.linux.resources.cpu.cpus == "1,5"

            def report() -> dict[str, Any]:
                try:
                    return client.request("GET", f"{NRT_PATH}/{NODE}")
                except Exception:
                    return {}

            def attrs() -> dict[str, str]:
                return {a["name"]: a["value"] for a in report().get("attributes", [])}

            await wait_until(
                lambda: attrs().get("nri-resmgr.containers.exclusive") == "1",
                what="the node report's exclusive container count",
            )
            zones = {z["name"]: z for z in report()["zones"]}
            assert "node-0" in zones
            assert any(z["type"] == "Pool" for z in zones.values())

            # a node-level object reserving CPUs 0-1: core {1,5} is reserved now, so the
            # database moves, through an unsolicited update
            client.request("POST", CM, body=_configmap(
                f"nri-resmgr-config.node.{NODE}",
                "policy: static\npolicyConfig: {reservedSystemCPUs: '0-1'}\n"))
            update = await rt.next_update(timeout=30)
            (moved,) = update.update
            assert moved.container_id == "db-pg"
            new = CPUSet.parse(moved.linux.resources.cpu.cpus)
            assert len(new) == 2 and new.isdisjoint(CPUSet.parse("0-1"))  # off the reserved
            await wait_until(
                lambda: plugin.config.policy_config.get("reservedSystemCPUs") == "0-1",
                what="the reloaded configuration",
            )

            # a broken document is rejected; the one in force stays
            client.request("PUT", f"{CM}/nri-resmgr-config.node.{NODE}", body=_configmap(
                f"nri-resmgr-config.node.{NODE}", "policy: static\nlog: {format: xml}\n"))

            def reasons() -> set[tuple[str, str]]:
                items = client.request("GET", f"/api/v1/namespaces/{NS}/events")["items"]
                return {(e["involvedObject"]["name"], e["reason"]) for e in items}

            await wait_until(
                lambda: (f"nri-resmgr-config.node.{NODE}", "ConfigRejected") in reasons(),
                what="a ConfigRejected event",
            )
            assert (f"nri-resmgr-config.node.{NODE}", "ConfigApplied") in reasons()
            assert plugin.config.policy_config.get("reservedSystemCPUs") == "0-1"
            reloads = plugin.metrics.exposition().decode()
            assert 'nri_resmgr_config_reloads_total{outcome="error"} 1.0' in reloads

    asyncio.run(asyncio.wait_for(scenario(), 120))
