"""The extender's shell: the NodeResourceTopology cache and the HTTP endpoints.

Theory of operation: `NrtCache` keeps every NodeResourceTopology object by node name:
it lists the collection, then watches it from the list's resourceVersion in a thread,
and lists again when a watch ends or fails (so objects created after the extender
started are used as soon as the API server has them: scheduler-plugins #967).  The map
is replaced whole on every change (copy on write), so a request reads one consistent
snapshot without a lock; each object is parsed (`fit.node_offer`) once, when it changes.

`serve` answers kube-scheduler's HTTP extender calls (``POST /filter``,
``POST /prioritize``, JSON bodies of `ExtenderArgs`: the pod and either ``nodenames``,
with ``nodeCacheCapable: true``, or a ``nodes`` list) with `fit.filter_nodes` and
`fit.prioritize` over the cache's parsed objects, plus ``GET /healthz`` and ``GET /metrics``
(requests by verb and outcome, their latency).  A body it cannot read is answered with
the ``error`` field, which kube-scheduler reports and, with ``ignorable: true`` in its
extender configuration, ignores; every node it cannot judge passes and is logged.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from nri_resmgr.kube.client import KubeClient, KubeError
from nri_resmgr.kube.report import NRT_PATH
from nri_resmgr.scheduler.fit import (
    Offer,
    Strategy,
    Unjudged,
    filter_nodes,
    node_offer,
    prioritize,
)

__all__ = ["MAX_BODY", "ExtenderMetrics", "NrtCache", "handle_request", "serve"]

#: the largest request body read (a NodeList of a few thousand nodes fits)
MAX_BODY = 64 << 20
_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5)


class NrtCache:
    """NodeResourceTopology objects by node name (module docstring)."""

    def __init__(self, client: KubeClient, *, log: Any) -> None:
        self.client = client
        self.log = log
        self._objects: Mapping[str, Mapping[str, Any]] = {}
        self._offers: Mapping[str, Offer | Unjudged] = {}
        self.synced = threading.Event()

    def snapshot(self) -> Mapping[str, Mapping[str, Any]]:
        """The objects by node name now."""
        return self._objects

    def offers(self) -> Mapping[str, Offer | Unjudged]:
        """Each object parsed (`fit.node_offer`), once per change of it."""
        return self._offers

    def relist(self) -> str:
        listing = self.client.request("GET", NRT_PATH)
        objects = {}
        for item in listing.get("items") or []:
            name = (item.get("metadata") or {}).get("name")
            if isinstance(name, str):
                objects[name] = item
        self._offers = {n: node_offer(n, o) for n, o in objects.items()}
        self._objects = objects
        self.synced.set()
        return str((listing.get("metadata") or {}).get("resourceVersion") or "")

    def apply(self, event: Mapping[str, Any]) -> None:
        obj = event.get("object") or {}
        name = (obj.get("metadata") or {}).get("name")
        if not isinstance(name, str):
            return
        objects, offers = dict(self._objects), dict(self._offers)
        if event.get("type") == "DELETED":
            objects.pop(name, None)
            offers.pop(name, None)
        elif event.get("type") in ("ADDED", "MODIFIED"):
            objects[name] = obj
            offers[name] = node_offer(name, obj)
        self._offers = offers
        self._objects = objects

    def run_blocking(
        self, stop: threading.Event, *, watch_seconds: int = 60, retry_seconds: float = 2.0
    ) -> None:
        while not stop.is_set():
            try:
                rv = self.relist()
                for event in self.client.watch(
                    NRT_PATH, resource_version=rv, timeout_seconds=watch_seconds
                ):
                    if stop.is_set():
                        return
                    if event.get("type") == "ERROR":
                        break  # e.g. 410 Gone: list again
                    self.apply(event)
            except KubeError as exc:
                self.log.warning("NodeResourceTopology list/watch failed", error=str(exc))
                stop.wait(retry_seconds)


class ExtenderMetrics:
    """The extender's Prometheus metrics, and its latest answer times per verb (seconds,
    the last `RECENT` of each, for benchmarks that want exact percentiles)."""

    RECENT = 10_000

    def __init__(self) -> None:
        self.recent: dict[str, deque[float]] = {
            v: deque(maxlen=self.RECENT) for v in ("filter", "prioritize")
        }
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "nri_resmgr_extender_requests",
            "Extender requests by verb and outcome",
            ["verb", "outcome"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "nri_resmgr_extender_seconds",
            "Time to answer an extender request",
            ["verb"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.nodes = Counter(
            "nri_resmgr_extender_nodes",
            "Nodes judged by the filter, by verdict (passed, failed, unjudged)",
            ["verdict"],
            registry=self.registry,
        )


def _field(args: Mapping[str, Any], name: str) -> Any:
    """`name` as kube-scheduler writes it (lower case) or as Go's field name."""
    return args[name.lower()] if name.lower() in args else args.get(name)


def _candidates(args: Mapping[str, Any]) -> tuple[list[str], list[Any] | None]:
    names = _field(args, "NodeNames")
    if isinstance(names, list):
        return [str(n) for n in names], None
    nodes = _field(args, "Nodes")
    items = nodes.get("items") if isinstance(nodes, Mapping) else None
    if not isinstance(items, list):
        raise ValueError("extender args: expected nodenames or nodes.items, found neither")
    return [str(((i or {}).get("metadata") or {}).get("name") or "") for i in items], items


def handle_request(
    verb: str,
    body: bytes,
    offers: Mapping[str, Offer | Unjudged],
    *,
    strategy: Strategy,
    log: Any,
    metrics: ExtenderMetrics | None = None,
) -> Any:
    """The JSON answer to one extender call (``filter`` or ``prioritize``)."""
    try:
        args = json.loads(body)
        if not isinstance(args, dict):
            raise ValueError(f"extender args: expected an object, found {type(args).__name__}")
        pod = _field(args, "Pod")
        if not isinstance(pod, dict):
            raise ValueError("extender args: expected a pod object")
        names, items = _candidates(args)
    except ValueError as exc:
        log.warning("extender request not understood", verb=verb, error=str(exc))
        if metrics is not None:
            metrics.requests.labels(verb=verb, outcome="error").inc()
        if verb == "prioritize":
            return []
        return {"error": str(exc)}
    meta = pod.get("metadata") or {}
    subject = f"{meta.get('namespace')}/{meta.get('name')}"
    if verb == "prioritize":
        scores = prioritize(pod, names, offers, strategy)
        if metrics is not None:
            metrics.requests.labels(verb=verb, outcome="ok").inc()
        return [{"host": n, "score": s} for n, s in scores.items()]
    result = filter_nodes(pod, names, offers)
    for node, reason in result.unjudged.items():
        log.info("node not judged; passed", pod=subject, node=node, reason=reason)
    for node, reason in result.failed.items():
        log.info("node filtered out", pod=subject, node=node, reason=reason)
    if metrics is not None:
        metrics.requests.labels(verb=verb, outcome="ok").inc()
        metrics.nodes.labels(verdict="failed").inc(len(result.failed))
        metrics.nodes.labels(verdict="unjudged").inc(len(result.unjudged))
        metrics.nodes.labels(verdict="passed").inc(len(result.passed) - len(result.unjudged))
    out: dict[str, Any] = {"failedNodes": dict(result.failed), "error": ""}
    if items is None:
        out["nodenames"] = list(result.passed)
    else:
        keep = set(result.passed)
        out["nodes"] = {"items": [i for i, n in zip(items, names, strict=True) if n in keep]}
    return out


async def _respond(
    writer: asyncio.StreamWriter, status: str, content_type: str, body: bytes
) -> None:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    try:
        writer.write(head.encode() + body)
        await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


async def serve(
    offers: Callable[[], Mapping[str, Offer | Unjudged]],
    *,
    host: str,
    port: int,
    strategy: Strategy,
    log: Any,
    metrics: ExtenderMetrics,
) -> asyncio.Server:
    """Serve the extender verbs over the parsed NRT objects `offers()` returns."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), timeout=10)
            parts = line.decode("latin-1").split()
            length = 0
            while True:
                header = await asyncio.wait_for(reader.readline(), timeout=10)
                if header in (b"\r\n", b"\n", b""):
                    break
                key, _, value = header.decode("latin-1").partition(":")
                if key.strip().lower() == "content-length":
                    length = int(value.strip())
            if length < 0 or length > MAX_BODY:
                await _respond(writer, "413 Payload Too Large", "text/plain", b"too large\n")
                return
            body = await asyncio.wait_for(reader.readexactly(length), timeout=30)
        except (TimeoutError, ConnectionError, ValueError, asyncio.IncompleteReadError):
            writer.close()
            return
        if len(parts) < 2:
            await _respond(writer, "400 Bad Request", "text/plain", b"bad request\n")
            return
        method, path = parts[0], parts[1].split("?", 1)[0]
        verb = path.strip("/")
        if method == "GET" and path == "/healthz":
            await _respond(writer, "200 OK", "text/plain", b"ok\n")
        elif method == "GET" and path == "/metrics":
            await _respond(writer, "200 OK", CONTENT_TYPE_LATEST, generate_latest(metrics.registry))
        elif method == "POST" and verb in ("filter", "prioritize"):
            start = time.perf_counter()
            answer = handle_request(
                verb, body, offers(), strategy=strategy, log=log, metrics=metrics
            )
            elapsed = time.perf_counter() - start
            metrics.latency.labels(verb=verb).observe(elapsed)
            metrics.recent[verb].append(elapsed)
            await _respond(writer, "200 OK", "application/json", json.dumps(answer).encode())
        else:
            await _respond(writer, "404 Not Found", "text/plain", b"not found\n")

    return await asyncio.start_server(handle, host, port)
