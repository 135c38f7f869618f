"""The daemon configured by nri-plugins' TopologyAwarePolicy objects on a real kube-apiserver.

As in test_daemon_kube: the daemon plugin runs in-process against
`nri_api.testing.FakeRuntime` (CPUs 0-7, n and n+4 siblings) and its KubeSide talks to a
real kube-apiserver; here its configuration comes from custom resources, and it writes
their per-node status.
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
from nri_resmgr.model import QoSClass
from nri_resmgr.ops.logs import get_logger
from nri_resmgr.runtime.daemon import ResmgrPlugin
from nri_resmgr.runtime.process import DaemonOptions
from nri_resmgr.topology.cpuset import CPUSet
from nri_resmgr.topology.model import Topology
from tests.integration.test_kube_config_resources import prepare
from tests.k8s.cluster import Cluster
from tests.support.daemon import kube_side_serving, resmgr_plugin
from tests.support.messages import guaranteed, pod
from tests.support.requirements import REPO
from tests.support.waiting import wait_until

NS = "daemon-cr-test"  # its own namespace: the session cluster is shared
NODE = "worker-8"
CRD = REPO / "charts" / "nri-resmgr" / "crds" / "config.nri_topologyawarepolicies.yaml"
BASE = f"/apis/config.nri/v1alpha1/namespaces/{NS}/topologyawarepolicies"


@pytest.fixture(scope="module")
def cluster(kube_cluster: Cluster) -> Cluster:
    prepare(kube_cluster, crd=CRD, node=NODE, namespace=NS)
    return kube_cluster


def _resource(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "config.nri/v1alpha1",
        "kind": "TopologyAwarePolicy",
        "metadata": {"name": name},
        "spec": spec,
    }


def test_daemon_follows_custom_resources_and_writes_status(
    cluster: Cluster, topology: Topology
) -> None:
    client = cluster.client
    client.request(
        "POST", BASE, body=_resource("default", {"reservedResources": {"cpu": "cpuset:0"}})
    )
    plugin_dir = Path(tempfile.mkdtemp(prefix="nri-", dir="/tmp"))
    sock = str(plugin_dir / "nri.sock")
    plugin = resmgr_plugin(
        Config(policy="none"), topology, socket_path=sock, on_close=OnClose.EXIT
    )
    options = DaemonOptions(
        node_name=NODE, namespace=NS, kubeconfig=str(cluster.kubeconfig()), report_interval=0.3
    )
    side = build_kube_side(plugin, options, log=get_logger("test"))
    assert side is not None
    # the custom resource is in force before the runtime connects
    assert plugin.config.policy == "topology-aware"
    assert plugin.config.policy_config["reservedResources"] == {"cpu": "cpuset:0"}

    def status(name: str) -> dict[str, Any]:
        got = client.request("GET", f"{BASE}/{name}")
        nodes = (got.get("status") or {}).get("nodes") or {}
        entry: dict[str, Any] = nodes.get(NODE) or {}
        return entry

    async def scenario() -> None:
        async with kube_side_serving(plugin, side, plugin_dir) as rt:
            await wait_until(
                lambda: status("default").get("status") == "Success",
                what="default: status Success",
            )
            db = pod("db", QoSClass.GUARANTEED)
            await rt.run_pod_sandbox(db)
            reply = await rt.create_container(db, guaranteed(db, "pg", "2"))
            first = CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)
            assert len(first) == 2 and 0 not in first

            # a node-level object reserving CPUs 0-3: every core has a CPU there, so the
            # database moves to 4-7, through an unsolicited update
            client.request(
                "POST",
                BASE,
                body=_resource(f"node.{NODE}", {"reservedResources": {"cpu": "cpuset:0-3"}}),
            )
            update = await rt.next_update(timeout=30)
            (moved,) = update.update
            assert moved.container_id == "db-pg"
            assert CPUSet.parse(moved.linux.resources.cpu.cpus) <= CPUSet.parse("4-7")
            await wait_until(
                lambda: status(f"node.{NODE}").get("status") == "Success",
                what=f"node.{NODE}: status Success",
            )
            assert status(f"node.{NODE}")["generation"] == 1
            await wait_until(
                lambda: status("default") == {},
                what="default: no status",
            )  # no longer this node's

            # a value this machine cannot take: Failure, the document in force stays
            client.request(
                "PATCH",
                f"{BASE}/node.{NODE}",
                body={"spec": {"availableResources": {"cpu": "cpuset:64-65"}}},
                content_type="application/merge-patch+json",
            )
            await wait_until(
                lambda: status(f"node.{NODE}").get("generation") == 2,
                what=f"node.{NODE}: generation 2",
            )
            failed = status(f"node.{NODE}")
            assert failed["status"] == "Failure"
            assert "leaves no online CPU" in failed["errors"]
            assert plugin.config.policy_config["reservedResources"] == {"cpu": "cpuset:0-3"}
            assert "availableResources" not in plugin.config.policy_config

    asyncio.run(asyncio.wait_for(scenario(), 120))


def test_config_status_n4c16_test12(cluster: Cluster, topology: Topology) -> None:
    """Their n4c16/test12-config-status: Success at start; a broken update (reserved CPU
    ``750x``) gives Failure; a broken group configuration at start is reported on that
    group's object.  Different by design: their daemon then fails to start, ours runs on
    its local configuration and retries when the object changes."""
    client = cluster.client
    node = "worker-9"
    client.request(
        "POST",
        "/api/v1/nodes",
        body={"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}},
    )
    ns = "daemon-cr-test12"
    client.request(
        "POST",
        "/api/v1/namespaces",
        body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
    )
    base = f"/apis/config.nri/v1alpha1/namespaces/{ns}/topologyawarepolicies"

    def custom_config(name: str, reserved: str) -> dict[str, Any]:
        return _resource(
            name,
            {
                "pinCPU": True,
                "pinMemory": True,
                "preferIsolatedCPUs": True,
                "preferSharedCPUs": False,
                "colocatePods": False,
                "colocateNamespaces": False,
                "reservedResources": {"cpu": reserved},
                "log": {"debug": ["resource-manager", "policy", "cache"], "source": True},
                "instrumentation": {"reportPeriod": "60s", "samplingRatePerMillion": 1000000},
            },
        )

    def status(name: str) -> dict[str, Any]:
        got = client.request("GET", f"{base}/{name}")
        entry: dict[str, Any] = ((got.get("status") or {}).get("nodes") or {}).get(node) or {}
        return entry

    async def run_daemon(check: Any) -> None:
        plugin_dir = Path(tempfile.mkdtemp(prefix="nri-", dir="/tmp"))
        sock = str(plugin_dir / "nri.sock")
        plugin = resmgr_plugin(
            Config(policy="none"), topology, socket_path=sock, on_close=OnClose.EXIT
        )
        options = DaemonOptions(
            node_name=node, namespace=ns, kubeconfig=str(cluster.kubeconfig()), report_interval=1
        )
        side = build_kube_side(plugin, options, log=get_logger("test"))
        assert side is not None
        async with kube_side_serving(plugin, side, plugin_dir):
            await check(plugin)

    async def first(plugin: ResmgrPlugin) -> None:
        await wait_until(
            lambda: status("default").get("status") == "Success",
            what="default: status Success",
        )
        assert plugin.config.policy == "topology-aware"
        client.request(
            "PUT",
            f"{base}/default",
            body={
                **custom_config("default", "750x"),
                "metadata": client.request("GET", f"{base}/default")["metadata"],
            },
        )
        await wait_until(
            lambda: status("default").get("status") == "Failure",
            what="default: status Failure",
        )
        assert "750x" in status("default")["errors"]
        assert plugin.config.policy_config["reservedResources"] == {"cpu": "750m"}

    async def second(plugin: ResmgrPlugin) -> None:
        await wait_until(
            lambda: status("group.test").get("status") == "Failure",
            what="group.test: status Failure",
        )
        assert "750x" in status("group.test")["errors"]
        assert plugin.config.policy == "none"  # its local configuration

    client.request("POST", base, body=custom_config("default", "750m"))
    asyncio.run(asyncio.wait_for(run_daemon(first), 120))
    client.request("POST", base, body=custom_config("group.test", "750x"))
    client.request(
        "PATCH",
        f"/api/v1/nodes/{node}",
        body={"metadata": {"labels": {"config.nri/group": "test"}}},
        content_type="application/merge-patch+json",
    )
    asyncio.run(asyncio.wait_for(run_daemon(second), 120))
