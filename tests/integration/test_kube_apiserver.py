"""Node reporting and configuration objects against a real kube-apiserver with etcd."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from nri_resmgr.config import Config
from nri_resmgr.kube.agent import ConfigWatcher, wait_until
from nri_resmgr.kube.client import KubeClient, load_kubeconfig
from nri_resmgr.kube.config_source import LiveConfig, Outcome
from nri_resmgr.kube.report import (
    NRT_PATH,
    ClassReporter,
    PoolReporter,
    ReportManager,
    TopologyReporter,
)
from nri_resmgr.ops.metrics import PoolSnapshot, StateSnapshot
from nri_resmgr.topology.synthetic import build_topology
from tests.k8s.cluster import Cluster
from tests.support.requirements import REPO

CRD = REPO / "charts" / "nri-resmgr" / "crds" / "noderesourcetopologies.yaml"
NS = "kube-system"


@pytest.fixture(scope="module")
def cluster(kube_cluster: Cluster) -> Cluster:
    kube_cluster.client.request("POST", "/api/v1/nodes", body={
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "worker-1", "labels": {"config.nri-resmgr.io/group": "gpu"}},
    })
    return kube_cluster


def _cm(client: KubeClient, name: str, text: str) -> None:
    client.request("POST", f"/api/v1/namespaces/{NS}/configmaps", body={
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
        "data": {"config.yaml": text}})


def test_kubeconfig_credentials_work(cluster: Cluster) -> None:
    client = KubeClient(load_kubeconfig(cluster.kubeconfig()))
    assert client.request("GET", "/api/v1/nodes/worker-1")["metadata"]["name"] == "worker-1"


def test_report_read_back_from_the_api_server(cluster: Cluster) -> None:
    topo = build_topology({"packages": 2, "nodes": 1, "cores": 2, "threads": 2, "memory": "1G"})
    snap = [StateSnapshot(pools=(PoolSnapshot("node0", 4, 4, 0, 0),))]
    mgr = ReportManager("worker-1", cluster.client, min_interval=0, clock=time.monotonic)
    mgr.register(TopologyReporter(topo))
    mgr.register(PoolReporter(lambda: snap[0], "topology-aware"))
    mgr.register(ClassReporter(["guaranteed"], []))
    assert mgr.cycle()
    # a known sequence: two exclusive CPUs granted, one container placed
    snap[0] = StateSnapshot(pools=(PoolSnapshot("node0", 4, 2, 2, 1),),
                            containers_by_kind={"exclusive": 1})
    assert mgr.cycle()
    assert not mgr.cycle()  # unchanged: no request
    assert mgr.requests == 2
    got = cluster.client.request("GET", f"{NRT_PATH}/worker-1")
    zones = {z["name"]: z for z in got["zones"]}
    assert sorted(zones) == ["node-0", "node-1", "pool-node0"]
    assert zones["node-1"]["costs"] == [{"name": "node-0", "value": 21},
                                        {"name": "node-1", "value": 10}]
    (cpu,) = [r for r in zones["pool-node0"]["resources"] if r["name"] == "cpu"]
    assert (cpu["capacity"], cpu["available"]) == ("4", "2")
    attrs = {a["name"]: a["value"] for a in got["attributes"]}
    assert attrs["nri-resmgr.containers.exclusive"] == "1"
    assert got["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "nri-resmgr"


def test_config_objects_watch_precedence_and_status(cluster: Cluster, tmp_path: Path) -> None:
    client = cluster.client
    watcher = ConfigWatcher(client, node="worker-1", namespace=NS)
    applied: list[str] = []
    outcomes: list[Outcome] = []

    def apply(config: Config) -> None:
        if config.policy == "explode":
            raise RuntimeError("policy explode cannot run here")
        applied.append(config.policy)

    def report(outcome: Outcome) -> None:
        outcomes.append(outcome)
        watcher.post_event(outcome)

    live = LiveConfig(watcher.resolve(), apply=apply, report=report)
    assert live.current.source.name == "built-in defaults"
    stop = threading.Event()
    thread = threading.Thread(
        target=watcher.run_blocking,
        args=(lambda: live.offer(watcher.resolve), stop),
        kwargs={"watch_seconds": 5},
        daemon=True,
    )
    thread.start()
    try:
        _cm(client, "nri-resmgr-config.default", "policy: none\n")
        assert wait_until(lambda: applied[-1:] == ["none"], timeout=30)
        _cm(client, "nri-resmgr-config.group.gpu", "policy: static\n")
        assert wait_until(lambda: applied[-1:] == ["static"], timeout=30)
        # a broken node-level object: rejected, the group one stays in force
        _cm(client, "nri-resmgr-config.node.worker-1", "log: {format: xml}\n")
        assert wait_until(lambda: any("rejected" in o.message for o in outcomes), timeout=30)
        assert live.current.config.policy == "static"
        # a valid one that fails to apply: reverted
        client.request("PUT", f"/api/v1/namespaces/{NS}/configmaps/nri-resmgr-config.node.worker-1",
                       body={"apiVersion": "v1", "kind": "ConfigMap",
                             "metadata": {"name": "nri-resmgr-config.node.worker-1"},
                             "data": {"config.yaml": "policy: explode\n"}})
        assert wait_until(lambda: any("failed" in o.message for o in outcomes), timeout=30)
        assert live.current.config.policy == "static"
        assert applied[-1] == "static"  # the previous one was re-applied
        client.request("DELETE",
                       f"/api/v1/namespaces/{NS}/configmaps/nri-resmgr-config.node.worker-1")
        client.request("DELETE", f"/api/v1/namespaces/{NS}/configmaps/nri-resmgr-config.group.gpu")
        assert wait_until(lambda: applied[-1:] == ["none"], timeout=30)
    finally:
        stop.set()
        thread.join(timeout=20)
    events = client.request("GET", f"/api/v1/namespaces/{NS}/events")["items"]
    reasons = {(e["involvedObject"]["name"], e["reason"]) for e in events}
    assert ("nri-resmgr-config.group.gpu", "ConfigApplied") in reasons
    assert ("nri-resmgr-config.node.worker-1", "ConfigRejected") in reasons
    rejected = [e for e in events if e["reason"] == "ConfigRejected"]
    assert any("log.format" in e["message"] for e in rejected)
