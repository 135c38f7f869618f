"""nri-plugins' configuration custom resources against a real kube-apiserver with etcd.

Their CRD (as our chart ships it), resources at the three levels (``default``,
``group.NAME`` by the node label ``config.nri/group``, ``node.NAME``), live updates, and
the per-node status their operators read (``status.nodes.NODE``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nri_resmgr.config import Config
from nri_resmgr.kube.agent import ConfigWatcher, wait_until
from nri_resmgr.kube.client import KubeClient, KubeError
from nri_resmgr.kube.config_source import LiveConfig, Outcome
from nri_resmgr.policy_registry import load_policy
from nri_resmgr.topology.synthetic import build_topology
from tests.k8s.cluster import Cluster
from tests.support.requirements import REPO

CRD = REPO / "charts" / "nri-resmgr" / "crds" / "config.nri_topologyawarepolicies.yaml"
NS = "config-cr-test"  # its own namespace: the session cluster is shared
NODE = "worker-cr"
TOPOLOGY = build_topology({"packages": 1, "nodes": 1, "cores": 4, "threads": 1, "memory": "1G"})
BASE = f"/apis/config.nri/v1alpha1/namespaces/{NS}/topologyawarepolicies"


def prepare(
    cluster: Cluster, *, crd: Path | None = None, node: str | None = None, namespace: str
) -> None:
    """A CRD (once per session cluster: others may have applied it), a node, a namespace."""
    if crd is not None:
        try:
            cluster.apply_yaml(crd)
        except KubeError as exc:
            if exc.status != 409:  # already there (another module of the session)
                raise
    if node is not None:
        cluster.client.request(
            "POST",
            "/api/v1/nodes",
            body={"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}},
        )
    cluster.client.request(
        "POST",
        "/api/v1/namespaces",
        body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
    )


@pytest.fixture(scope="module")
def cluster(kube_cluster: Cluster) -> Cluster:
    prepare(kube_cluster, crd=CRD, node=NODE, namespace=NS)
    return kube_cluster


def _create(client: KubeClient, name: str, spec: dict[str, Any]) -> None:
    client.request(
        "POST",
        BASE,
        body={
            "apiVersion": "config.nri/v1alpha1",
            "kind": "TopologyAwarePolicy",
            "metadata": {"name": name},
            "spec": spec,
        },
    )


def _update(client: KubeClient, name: str, spec: dict[str, Any]) -> None:
    client.request(
        "PATCH",
        f"{BASE}/{name}",
        body={"spec": spec},
        content_type="application/merge-patch+json",
    )


def _node_status(client: KubeClient, name: str) -> dict[str, Any] | None:
    got = client.request("GET", f"{BASE}/{name}")
    nodes = (got.get("status") or {}).get("nodes") or {}
    status: dict[str, Any] | None = nodes.get(NODE)
    return status


class Daemonish:
    """The watcher and live configuration wired as the daemon wires them."""

    def __init__(self, client: KubeClient, namespace: str = NS) -> None:
        self.watcher = ConfigWatcher(client, node=NODE, namespace=namespace)
        self.applied: list[dict[str, Any]] = []
        self.outcomes: list[Outcome] = []
        self.live = LiveConfig(
            self.watcher.resolve(), apply=self.apply, report=self.outcomes.append
        )
        self.stop = threading.Event()

    def apply(self, config: Config) -> None:
        # the daemon builds the policy for the machine: a value wrong for it fails here
        load_policy(config.policy, topology=TOPOLOGY, config=config.policy_config)
        self.applied.append(dict(config.policy_config))

    def on_change(self) -> None:
        self.watcher.record_status(self.live.offer(self.watcher.resolve))

    def source(self) -> str:
        return self.live.current.source.name

    @property
    def config(self) -> dict[str, Any]:
        return dict(self.live.current.config.policy_config)


@pytest.fixture
def daemon(cluster: Cluster) -> Iterator[Daemonish]:
    d = Daemonish(cluster.client)
    thread = threading.Thread(
        target=d.watcher.run_blocking,
        args=(d.on_change, d.stop),
        kwargs={"watch_seconds": 3, "missing_seconds": 1},
        daemon=True,
    )
    thread.start()
    yield d
    d.stop.set()
    thread.join(timeout=20)


def test_node_over_group_over_default_live_with_status(cluster: Cluster, daemon: Daemonish) -> None:
    client = cluster.client
    # a ConfigMap for the node too: a custom resource that applies wins over it
    client.request(
        "POST",
        f"/api/v1/namespaces/{NS}/configmaps",
        body={
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"nri-resmgr-config.node.{NODE}"},
            "data": {"config.yaml": "policy: none\n"},
        },
    )
    assert wait_until(lambda: daemon.live.current.config.policy == "none", timeout=30)

    _create(client, "default", {"reservedResources": {"cpu": "750m"}, "pinMemory": False})
    assert wait_until(lambda: daemon.source() == f"TopologyAwarePolicy {NS}/default", timeout=30)
    assert daemon.live.current.config.policy == "topology-aware"
    assert daemon.config["reservedResources"] == {"cpu": "750m"}
    assert daemon.config["pinMemory"] is False
    assert daemon.live.current.config.warnings == ()  # the CRD's defaults are not warned
    assert wait_until(lambda: _node_status(client, "default") is not None, timeout=30)
    status = _node_status(client, "default")
    assert status is not None
    assert (status["status"], status["generation"], status["errors"]) == ("Success", 1, "")
    assert status["timestamp"]

    # the group level: by the node label config.nri/group (read again on each relist)
    _create(client, "group.gpu", {"reservedResources": {"cpu": "1"}, "colocatePods": True})
    client.request(
        "PATCH",
        f"/api/v1/nodes/{NODE}",
        body={"metadata": {"labels": {"config.nri/group": "gpu"}}},
        content_type="application/merge-patch+json",
    )
    assert wait_until(lambda: daemon.source().endswith("/group.gpu"), timeout=30)
    assert daemon.config["colocatePods"] is True
    assert wait_until(lambda: _node_status(client, "group.gpu") is not None, timeout=30)
    assert wait_until(lambda: _node_status(client, "default") is None, timeout=30)

    # the node level wins; then updated live
    _create(client, f"node.{NODE}", {"reservedResources": {"cpu": "1"}, "pinCPU": False})
    assert wait_until(lambda: daemon.source().endswith(f"/node.{NODE}"), timeout=30)
    assert wait_until(lambda: _node_status(client, "group.gpu") is None, timeout=30)
    _update(client, f"node.{NODE}", {"reservedResources": {"cpu": "2"}})
    assert wait_until(lambda: daemon.config.get("reservedResources") == {"cpu": "2"}, timeout=30)
    assert wait_until(
        lambda: (_node_status(client, f"node.{NODE}") or {}).get("generation") == 2, timeout=30
    )
    assert (_node_status(client, f"node.{NODE}") or {})["status"] == "Success"

    # a misspelt key never reaches the daemon: the API server prunes fields its schema
    # lacks (the generation does not even change)
    _update(client, f"node.{NODE}", {"pinCPUs": True})
    assert "pinCPUs" not in client.request("GET", f"{BASE}/node.{NODE}")["spec"]

    # an invalid value: Failure status with the error, the previous config stays in force
    _update(client, f"node.{NODE}", {"availableResources": {"cpu": "cpuset:100-101"}})
    assert wait_until(
        lambda: (_node_status(client, f"node.{NODE}") or {}).get("generation") == 3, timeout=30
    )
    status = _node_status(client, f"node.{NODE}")
    assert status is not None
    assert status["status"] == "Failure"
    assert "availableResources.cpu: 'cpuset:100-101' leaves no online CPU" in status["errors"]
    assert daemon.config["reservedResources"] == {"cpu": "2"}
    assert daemon.live.current.source.generation == 2
    assert any("failed" in o.message for o in daemon.outcomes)

    # fixed again, then deleted: back to the group level
    _update(client, f"node.{NODE}", {"availableResources": None})
    assert wait_until(
        lambda: (_node_status(client, f"node.{NODE}") or {}).get("status") == "Success",
        timeout=30,
    )
    client.request("DELETE", f"{BASE}/node.{NODE}")
    assert wait_until(lambda: daemon.source().endswith("/group.gpu"), timeout=30)
    assert wait_until(lambda: _node_status(client, "group.gpu") is not None, timeout=30)


BALLOONS_CRD = REPO / "charts" / "nri-resmgr" / "crds" / "config.nri_balloonspolicies.yaml"
BALLOONS_NS = "config-cr-balloons"


def test_a_balloons_policy_resource_configures_the_balloons_policy(cluster: Cluster) -> None:
    """Their BalloonsPolicy kind, as the chart ships its CRD: read, applied, status written
    (Success, then Failure for a broken update: their n4c16/test20-config-status)."""
    client = cluster.client
    prepare(cluster, crd=BALLOONS_CRD, namespace=BALLOONS_NS)
    base = f"/apis/config.nri/v1alpha1/namespaces/{BALLOONS_NS}/balloonspolicies"
    d = Daemonish(client, namespace=BALLOONS_NS)
    thread = threading.Thread(
        target=d.watcher.run_blocking,
        args=(d.on_change, d.stop),
        kwargs={"watch_seconds": 3, "missing_seconds": 1},
        daemon=True,
    )
    thread.start()
    # node.NAME: the first test leaves the node in a group, which hides `default`
    name = f"node.{NODE}"
    try:
        spec = {
            "reservedResources": {"cpu": "750m"},
            "balloonTypes": [{"name": "web", "namespaces": ["web"], "minCPUs": 1}],
        }
        client.request(
            "POST",
            base,
            body={
                "apiVersion": "config.nri/v1alpha1",
                "kind": "BalloonsPolicy",
                "metadata": {"name": name},
                "spec": spec,
            },
        )
        assert wait_until(lambda: d.live.current.config.policy == "balloons", timeout=30)
        assert d.source() == f"BalloonsPolicy {BALLOONS_NS}/{name}"
        assert d.config["balloonTypes"][0]["name"] == "web"

        def status() -> dict[str, Any]:
            got = client.request("GET", f"{base}/{name}")
            nodes: dict[str, Any] = (got.get("status") or {}).get("nodes") or {}
            return nodes.get(NODE) or {}

        assert wait_until(lambda: status().get("status") == "Success", timeout=30)

        # their n4c16/test20-config-status: a broken update (minCPUs above maxCPUs) gets
        # Failure naming the key and the type; the configuration in force stays
        broken = {**spec, "balloonTypes": [{"name": "web", "minCPUs": 33, "maxCPUs": 32}]}
        client.request(
            "PATCH",
            f"{base}/{name}",
            body={"spec": broken},
            content_type="application/merge-patch+json",
        )
        assert wait_until(lambda: status().get("status") == "Failure", timeout=30)
        assert "minCPUs" in status()["errors"] and "web" in status()["errors"]
        assert d.config["balloonTypes"][0]["minCPUs"] == 1
        assert d.live.current.config.policy == "balloons"
    finally:
        d.stop.set()
        thread.join(timeout=20)
