"""Events on the pod, posted by the daemon to a real kube-apiserver.

The daemon plugin runs in-process against `nri_api.testing.FakeRuntime` over a real Unix
socket (the machine of tests/integration/test_daemon.py: CPUs 0-7, n and n+4 siblings),
its Kubernetes side against a real kube-apiserver with etcd (tests/k8s).  A placement is a
Normal ``Placed`` event on the pod, a refusal a Warning ``PlacementRefused``; the two
containers of one pod placed within the coalescing window are one event.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import pytest

from nri_api.errors import RPCError
from nri_api.stub import OnClose
from nri_resmgr.config import Config
from nri_resmgr.kube.agent import build_kube_side
from nri_resmgr.model import ContainerID, QoSClass
from nri_resmgr.ops.logs import get_logger
from nri_resmgr.runtime.process import DaemonOptions
from nri_resmgr.topology.model import Topology
from nri_resmgr.view.events import describe_placement
from tests.k8s.cluster import Cluster
from tests.support.daemon import kube_side_serving, resmgr_plugin
from tests.support.messages import guaranteed, pod

NS = "pod-events-test"  # the daemon's namespace (its ConfigMaps); the pods' is APPS
APPS = "pod-events-apps"
NODE = "worker-events"
CM = f"/api/v1/namespaces/{NS}/configmaps"
CONFIG = """\
policy: static
policyConfig: {reservedSystemCPUs: '0'}
events: {coalesceSeconds: 0.5, rate: 10, burst: 5}
"""


@pytest.fixture(scope="module")
def cluster(kube_cluster: Cluster) -> Cluster:
    client = kube_cluster.client
    client.request(
        "POST",
        "/api/v1/nodes",
        body={"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}},
    )
    for ns in (NS, APPS):
        client.request(
            "POST",
            "/api/v1/namespaces",
            body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
        )
    client.request(
        "POST",
        CM,
        body={
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "nri-resmgr-config.default"},
            "data": {"config.yaml": CONFIG},
        },
    )
    return kube_cluster


async def _until(pred: Any, timeout: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not pred():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.1)


def test_placements_and_refusals_are_events_on_the_pod(
    cluster: Cluster, topology: Topology
) -> None:
    client = cluster.client
    plugin_dir = Path(tempfile.mkdtemp(prefix="nri-", dir="/tmp"))
    sock = str(plugin_dir / "nri.sock")
    plugin = resmgr_plugin(Config(), topology, socket_path=sock, on_close=OnClose.EXIT)
    options = DaemonOptions(node_name=NODE, namespace=NS, kubeconfig=str(cluster.kubeconfig()))
    side = build_kube_side(plugin, options, log=get_logger("test"))
    assert side is not None
    assert plugin.config.events.coalesce_seconds == 0.5  # the cluster's document

    def events() -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = client.request("GET", f"/api/v1/namespaces/{APPS}/events")[
            "items"
        ]
        return items

    async def scenario() -> None:
        async with kube_side_serving(plugin, side, plugin_dir) as rt:
            db = pod("db", QoSClass.GUARANTEED, namespace=APPS)
            await rt.run_pod_sandbox(db)
            await rt.create_container(db, guaranteed(db, "pg", "2"))
            await rt.create_container(db, guaranteed(db, "sidecar", "1"))
            words = {
                name: describe_placement(plugin.pipeline.assignments[ContainerID(f"db-{name}")])
                for name in ("pg", "sidecar")
            }
            assert words["pg"].startswith("exclusive CPUs 1,5")
            big = pod("big", QoSClass.GUARANTEED, namespace=APPS)
            await rt.run_pod_sandbox(big)
            with pytest.raises(RPCError) as refused:
                await rt.create_container(big, guaranteed(big, "huge", "16"))
            await _until(lambda: len(events()) >= 2)
            await asyncio.sleep(1.5)  # anything more would have come by now
            by_pod = {e["involvedObject"]["name"]: e for e in events()}
            assert len(events()) == 2, events()  # the two containers of db: one event

            placed = by_pod["db"]
            assert placed["involvedObject"] == {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": "db",
                "namespace": APPS,
                "uid": db.uid,
            }
            assert (placed["reason"], placed["type"], placed["count"]) == ("Placed", "Normal", 2)
            assert placed["message"] == (
                f"container pg: {words['pg']}; container sidecar: {words['sidecar']}"
            )
            assert placed["source"] == {"component": "nri-resmgr", "host": NODE}

            warning = by_pod["big"]
            assert warning["involvedObject"]["uid"] == big.uid
            assert (warning["reason"], warning["type"]) == ("PlacementRefused", "Warning")
            assert warning["message"] == f"container huge: {refused.value.message}"
            assert "16" in warning["message"]

    asyncio.run(asyncio.wait_for(scenario(), 120))
