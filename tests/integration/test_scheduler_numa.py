"""The real kube-scheduler (v1.34, built from its module) calling this project's extender
over HTTP, on a real kube-apiserver with etcd: pods are bound by the nodes' NUMA zones.

The nodes are Node objects without kubelets (a binding is all the scheduler does); their
NodeResourceTopology objects stand for what each node's daemon would report (the
daemon's own reports are tested in test_daemon_nrt.py).  Each node has 8 CPUs in two
NUMA zones of 4:

- node-a: 1 CPU free in each zone (2 free in all: the plain scheduler would still send a
  2-CPU pod there, and the daemon would have to split or refuse it);
- node-b: 3 CPUs free in zone 0, none in zone 1.

A Guaranteed 2-CPU pod goes to node-b; a 4-CPU one fits nowhere and stays Pending with the
extender's reason in its FailedScheduling event; when the first pod is deleted and node-b's
zone 0 is reported free again, the waiting pod is bound there; a node whose object is
created after the scheduler and extender started (node-c) is used at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
import yaml

from nri_resmgr.kube.agent import wait_until
from nri_resmgr.kube.client import KubeClient, KubeError
from nri_resmgr.kube.report import NRT_PATH
from nri_resmgr.scheduler.fit import Strategy
from nri_resmgr.scheduler.server import ExtenderMetrics, NrtCache, serve
from tests.k8s.cluster import Cluster, _free_port
from tests.k8s.components import build_node_components

QUIET = structlog.wrap_logger(structlog.ReturnLogger())
NS = "numa-sched"


def _node(client: KubeClient, name: str) -> None:
    client.request("POST", "/api/v1/nodes", body={
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})  # fmt: skip
    status = {
        "capacity": {"cpu": "8", "memory": "16Gi", "pods": "110"},
        "allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "message": "ready", "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}],
    }  # fmt: skip
    client.request("PATCH", f"/api/v1/nodes/{name}/status", body={"status": status},
                   content_type="application/merge-patch+json")  # fmt: skip
    # the API server taints a new node not-ready until a kubelet says otherwise: none will
    client.request("PATCH", f"/api/v1/nodes/{name}", body={"spec": {"taints": None}},
                   content_type="application/merge-patch+json")  # fmt: skip


def _nrt(name: str, free: tuple[int, int]) -> dict[str, Any]:
    return {
        "apiVersion": "topology.node.k8s.io/v1alpha2", "kind": "NodeResourceTopology",
        "metadata": {"name": name},
        "attributes": [{"name": "topologyManagerPolicy", "value": "best-effort"},
                       {"name": "topologyManagerScope", "value": "container"}],
        "zones": [
            {"name": f"node-{i}", "type": "Node", "resources": [
                {"name": "cpu", "capacity": "4", "allocatable": "4", "available": str(f)},
                {"name": "memory", "capacity": "8Gi", "allocatable": "8Gi",
                 "available": "8Gi"}]}
            for i, f in enumerate(free)
        ],
    }  # fmt: skip


def _put_nrt(client: KubeClient, name: str, free: tuple[int, int]) -> None:
    obj = _nrt(name, free)
    try:
        obj["metadata"] = client.request("GET", f"{NRT_PATH}/{name}")["metadata"]
        client.request("PUT", f"{NRT_PATH}/{name}", body=obj)
    except KubeError:
        client.request("POST", NRT_PATH, body=obj)


def _pod(name: str, cpus: int) -> dict[str, Any]:
    res = {"cpu": str(cpus), "memory": "1Gi"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS},
            "spec": {"containers": [{"name": "c", "image": "busybox",
                                     "resources": {"requests": res, "limits": res}}]}}  # fmt: skip


@pytest.fixture
def scheduler(kube_cluster: Cluster, tmp_path: Path) -> Iterator[tuple[KubeClient, NrtCache]]:
    components = build_node_components()
    client = kube_cluster.client
    client.request("POST", "/api/v1/namespaces", body={
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})  # fmt: skip
    for n in ("node-a", "node-b"):
        _node(client, n)
    _put_nrt(client, "node-a", (1, 1))
    _put_nrt(client, "node-b", (3, 0))

    cache = NrtCache(client, log=QUIET)
    stop = threading.Event()
    watcher = threading.Thread(target=cache.run_blocking, args=(stop,),
                               kwargs={"watch_seconds": 10}, daemon=True)  # fmt: skip
    watcher.start()
    port = _free_port()
    loop = asyncio.new_event_loop()
    ready = threading.Event()

    def serve_forever() -> None:
        async def main() -> None:
            server = await serve(cache.offers, host="127.0.0.1", port=port,
                                 strategy=Strategy.LEAST_ALLOCATED, log=QUIET,
                                 metrics=ExtenderMetrics())  # fmt: skip
            ready.set()
            async with server:
                await asyncio.Event().wait()

        with contextlib.suppress(RuntimeError):  # stopped at teardown
            loop.run_until_complete(main())

    threading.Thread(target=serve_forever, daemon=True).start()
    assert ready.wait(10)
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kube_cluster.kubeconfig())},
        "leaderElection": {"leaderElect": False},
        "extenders": [{"urlPrefix": f"http://127.0.0.1:{port}", "filterVerb": "filter",
                       "prioritizeVerb": "prioritize", "weight": 5,
                       "nodeCacheCapable": True, "ignorable": False}],
    }  # fmt: skip
    (tmp_path / "sched.yaml").write_text(yaml.safe_dump(config))
    log = open(tmp_path / "kube-scheduler.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [str(components["kube-scheduler"]), f"--config={tmp_path / 'sched.yaml'}",
         f"--authentication-kubeconfig={kube_cluster.kubeconfig()}",
         f"--authorization-kubeconfig={kube_cluster.kubeconfig()}",
         "--bind-address=127.0.0.1", f"--secure-port={_free_port()}",
         f"--cert-dir={tmp_path / 'certs'}", "--v=2"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        yield client, cache
    finally:
        proc.terminate()
        proc.wait(20)
        log.close()
        stop.set()
        loop.call_soon_threadsafe(loop.stop)
        for n in ("node-a", "node-b", "node-c"):
            for path in (f"/api/v1/nodes/{n}", f"{NRT_PATH}/{n}"):
                with contextlib.suppress(KubeError):
                    client.request("DELETE", path)
        print((tmp_path / "kube-scheduler.log").read_text()[-3000:])


def _bound(client: KubeClient, name: str) -> str:
    pod = client.request("GET", f"/api/v1/namespaces/{NS}/pods/{name}")
    return str(pod["spec"].get("nodeName") or "")


def _events(client: KubeClient, name: str) -> list[str]:
    items = client.request("GET", f"/api/v1/namespaces/{NS}/events")["items"]
    return [
        e.get("message", "")
        for e in items
        if e["involvedObject"]["name"] == name and e.get("reason") == "FailedScheduling"
    ]


def test_pods_go_where_a_numa_zone_holds_them(
    scheduler: tuple[KubeClient, NrtCache],
) -> None:
    client, cache = scheduler
    pods = f"/api/v1/namespaces/{NS}/pods"
    assert wait_until(lambda: {"node-a", "node-b"} <= set(cache.snapshot()), timeout=30)
    client.request("POST", pods, body=_pod("two", 2))
    assert wait_until(lambda: _bound(client, "two") != "", timeout=60), _events(client, "two")
    assert _bound(client, "two") == "node-b"  # node-a has 2 CPUs, but 1 per zone

    # node-b's zone 0 now has 1 CPU free (the daemon's report after the grant)
    _put_nrt(client, "node-b", (1, 0))
    client.request("POST", pods, body=_pod("four", 4))
    assert wait_until(lambda: bool(_events(client, "four")), timeout=60)
    assert _bound(client, "four") == ""
    message = _events(client, "four")[-1]
    assert "needs 4 exclusive CPUs" in message and "node-b" in message, message

    # the first pod goes; node-b's report returns its CPUs; the waiting pod is bound
    # (the pod's deletion requeues it; the report is in the extender before that)
    _put_nrt(client, "node-b", (4, 0))
    assert wait_until(
        lambda: [z["resources"][0]["available"]
                 for z in cache.snapshot()["node-b"]["zones"]] == ["4", "0"],
        timeout=30,
    )  # fmt: skip
    client.request("DELETE", f"{pods}/two?gracePeriodSeconds=0")
    assert wait_until(lambda: _bound(client, "four") == "node-b", timeout=90)

    # a node whose report appears after the scheduler and the extender started
    _node(client, "node-c")
    _put_nrt(client, "node-c", (4, 4))
    assert wait_until(lambda: "node-c" in cache.snapshot(), timeout=30)
    start = time.monotonic()
    client.request("POST", pods, body=_pod("late", 3))
    assert wait_until(lambda: _bound(client, "late") != "", timeout=90)
    assert _bound(client, "late") == "node-c", time.monotonic() - start
