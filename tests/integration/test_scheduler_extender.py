"""The scheduler extender's shell: its HTTP verbs over a real TCP socket, and its cache
of NodeResourceTopology objects against a real kube-apiserver (objects created, changed
and deleted after it started are seen)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Mapping
from typing import Any

import structlog

from nri_resmgr.kube.agent import wait_until
from nri_resmgr.kube.report import NRT_PATH
from nri_resmgr.scheduler.fit import Offer, Strategy, offers_of
from nri_resmgr.scheduler.server import ExtenderMetrics, NrtCache, serve
from tests.k8s.cluster import Cluster
from tests.unit.scheduler.test_fit import container, kpod, nrt

QUIET = structlog.wrap_logger(structlog.ReturnLogger())
NRTS: dict[str, Mapping[str, Any]] = {
    "roomy": nrt(("node-0", 4, 4), ("node-1", 4, 4)),
    "tight": nrt(("node-0", 1, 4), ("node-1", 1, 4)),
}


async def call(port: int, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    await writer.drain()
    data = await reader.read()
    writer.close()
    head, _, payload = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), payload


def test_filter_prioritize_health_and_metrics_over_http() -> None:
    async def scenario() -> None:
        metrics = ExtenderMetrics()
        server = await serve(lambda: offers_of(list(NRTS), NRTS), host="127.0.0.1", port=0,
                             strategy=Strategy.LEAST_ALLOCATED, log=QUIET,
                             metrics=metrics)  # fmt: skip
        port = server.sockets[0].getsockname()[1]
        async with server:
            pod = kpod(container("db", "2", "1Gi"))
            args = {"pod": pod, "nodenames": ["roomy", "tight", "unknown"]}
            status, body = await call(port, "POST", "/filter", json.dumps(args).encode())
            got = json.loads(body)
            assert status == 200
            assert got["nodenames"] == ["roomy", "unknown"]
            assert list(got["failedNodes"]) == ["tight"]
            assert "needs 2 exclusive CPUs" in got["failedNodes"]["tight"]
            # the NodeList form (nodeCacheCapable: false) answers with the node objects
            nodes = [{"metadata": {"name": n}, "spec": {}} for n in ("roomy", "tight")]
            args = {"Pod": pod, "Nodes": {"items": nodes}}
            _, body = await call(port, "POST", "/filter", json.dumps(args).encode())
            assert json.loads(body)["nodes"]["items"] == nodes[:1]
            args = {"pod": pod, "nodenames": ["roomy", "tight"]}
            _, body = await call(port, "POST", "/prioritize", json.dumps(args).encode())
            scores = {h["host"]: h["score"] for h in json.loads(body)}
            assert scores["roomy"] > scores["tight"] == 0
            status, body = await call(port, "POST", "/filter", b"{not json")
            assert status == 200 and json.loads(body)["error"]
            status, _ = await call(port, "GET", "/healthz")
            assert status == 200
            status, _ = await call(port, "GET", "/nothing")
            assert status == 404
            _, text = await call(port, "GET", "/metrics")
            assert b'nri_resmgr_extender_requests_total{outcome="ok",verb="filter"} 2.0' in text
            assert b'nri_resmgr_extender_requests_total{outcome="error",verb="filter"} 1.0' in text
            assert b'nri_resmgr_extender_nodes_total{verdict="unjudged"} 1.0' in text

    asyncio.run(asyncio.wait_for(scenario(), 30))


def _nrt_object(name: str, available: int) -> dict[str, Any]:
    obj = nrt(("node-0", available, 4))
    obj.update(apiVersion="topology.node.k8s.io/v1alpha2", kind="NodeResourceTopology",
               metadata={"name": name})  # fmt: skip
    return obj


def test_the_cache_sees_objects_made_after_it_started(kube_cluster: Cluster) -> None:
    client = kube_cluster.client
    client.request("POST", NRT_PATH, body=_nrt_object("early-node", 4))
    cache = NrtCache(client, log=QUIET)
    stop = threading.Event()
    thread = threading.Thread(target=cache.run_blocking, args=(stop,),
                              kwargs={"watch_seconds": 5}, daemon=True)  # fmt: skip
    thread.start()
    try:
        assert cache.synced.wait(30)
        assert "early-node" in cache.snapshot()
        client.request("POST", NRT_PATH, body=_nrt_object("late-node", 3))
        assert wait_until(lambda: "late-node" in cache.snapshot(), timeout=30)
        late = _nrt_object("late-node", 1)
        late["metadata"] = client.request("GET", f"{NRT_PATH}/late-node")["metadata"]
        client.request("PUT", f"{NRT_PATH}/late-node", body=late)

        def available() -> str:
            zones = cache.snapshot().get("late-node", {}).get("zones", [])
            return str(zones[0]["resources"][0]["available"]) if zones else ""

        assert wait_until(lambda: available() == "1", timeout=30)
        late_offer = cache.offers()["late-node"]
        assert isinstance(late_offer, Offer) and late_offer.zones[0].cpus == 1
        client.request("DELETE", f"{NRT_PATH}/early-node")
        assert wait_until(lambda: "early-node" not in cache.snapshot(), timeout=30)
        assert "early-node" not in cache.offers()  # judged as a node without a report
    finally:
        stop.set()
        thread.join(timeout=10)
