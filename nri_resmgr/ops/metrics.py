"""Prometheus metrics and the health endpoints.

Theory of operation: one `Metrics` object per daemon owns its own
`prometheus_client.CollectorRegistry` (no process-global registry, so tests and several
daemons in one process never collide).  The pipeline shell calls `observe_event` around
every NRI event.  The allocation gauges are replaced wholesale from a snapshot, so a gauge
can never drift from the state it describes: `refresh`, when set, is called for a fresh
snapshot at every scrape (a snapshot walks every live container, so it is kept off the
event path), and `observe_state` sets one directly.  A policy with balloons (its
``balloons(state)`` hook, read by `balloon_snapshots`) adds ``nri_resmgr_balloons``,
``nri_resmgr_balloon_cpus`` and ``nri_resmgr_balloon_containers``, per balloon type.
RDT monitoring counters are read at scrape time too: `rdt_refresh`, when set, returns
`RdtReading` values that become the gauges nri-plugins exports (goresctrl's collector
with the ``nri`` prefix):
``nri_l3_llc_occupancy``, ``nri_l3_mbm_local_bytes`` and ``nri_l3_mbm_total_bytes``,
labelled ``cache_id``, ``rdt_class`` and ``rdt_mon_group``.  The two bandwidth values are
the kernel's running byte counts; they are gauges here, as the project exports them, so
their names carry no ``_total`` suffix.  `HealthState` holds the two facts
the probes report: the daemon is alive (`/healthz`) and it is registered with the runtime
and synchronized (`/readyz`).
`serve_http` is the asyncio HTTP shell for `/metrics`, `/healthz` and `/readyz`, and for
any read-only `pages` the daemon adds (the node picture, `nri_resmgr.view.pages`).
"""

from __future__ import annotations

import asyncio
import contextlib
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from nri_resmgr.model import Assignment, CPUKind, PolicyState
from nri_resmgr.policy.base import Policy

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0)


@dataclass(frozen=True, slots=True)
class PoolSnapshot:
    """One pool's capacity and use, in CPUs."""

    name: str
    capacity: int
    shared: int
    exclusive: int
    containers: int


@dataclass(frozen=True, slots=True)
class BalloonSnapshot:
    """One balloon (a policy's named group of CPUs and the containers on them)."""

    name: str
    type: str
    cpus: str
    cpu_count: int
    shared_idle_cpus: str
    mems: str
    containers: tuple[str, ...]
    show_containers: bool = False
    #: a composite balloon's CPUs per component, nested ("" when plain)
    component_cpus: str = ""
    #: the millicores of its CPUs its containers did not request
    excess_milli: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "cpus": self.cpus,
            "shared_idle_cpus": self.shared_idle_cpus,
            "mems": self.mems,
            "containers": list(self.containers),
        }


@dataclass(frozen=True, slots=True)
class StateSnapshot:
    pools: tuple[PoolSnapshot, ...] = ()
    containers_by_kind: Mapping[str, int] = field(default_factory=dict)
    balloons: tuple[BalloonSnapshot, ...] = ()


def balloon_snapshots(
    policy: Policy, state: PolicyState, *, names: Mapping[str, str] | None = None
) -> tuple[BalloonSnapshot, ...]:
    """The balloons of `policy` in `state`, from its ``balloons(state)`` hook.

    A policy without balloons has none (the contract's default).  `names` maps
    container ids to the names a report shows (the simulator's ``pod/container``).
    """
    names = names or {}
    return tuple(
        BalloonSnapshot(
            name=b.name,
            type=b.type,
            cpus=str(b.cpus),
            cpu_count=len(list(b.cpus)),
            shared_idle_cpus=str(b.shared_idle_cpus),
            mems=str(b.mems),
            containers=tuple(names.get(c, c) for c in b.containers),
            show_containers=b.show_containers_in_nrt,
            component_cpus=b.component_cpus,
            excess_milli=b.excess_milli,
        )
        for b in policy.balloons(state)
    )


def state_snapshot(
    assignments: Iterable[Assignment | None], policy: Policy, state: PolicyState
) -> StateSnapshot:
    """Pools and containers as the metrics and the node report show them, from the live
    containers' `assignments` (None: not placed), and `policy`'s balloons in `state`.

    Derived from the assignments, so it holds for every policy: a pool's exclusive CPUs
    are those granted exclusively (or isolated) in it, its shared CPUs the union of what
    its shared containers run on.
    """
    kinds: dict[str, int] = {}
    shared: dict[str, set[int]] = {}
    exclusive: dict[str, set[int]] = {}
    counts: dict[str, int] = {}
    for a in assignments:
        kind = str(a.kind) if a is not None else "unknown"
        kinds[kind] = kinds.get(kind, 0) + 1
        if a is None or not a.pool:
            continue
        counts[a.pool] = counts.get(a.pool, 0) + 1
        target = exclusive if a.kind in (CPUKind.EXCLUSIVE, CPUKind.ISOLATED) else shared
        target.setdefault(a.pool, set()).update(a.cpus)
    pools = tuple(
        PoolSnapshot(
            name=name,
            capacity=len(shared.get(name, set()) | exclusive.get(name, set())),
            shared=len(shared.get(name, set())),
            exclusive=len(exclusive.get(name, set())),
            containers=n,
        )
        for name, n in sorted(counts.items())
    )
    return StateSnapshot(
        pools=pools, containers_by_kind=kinds, balloons=balloon_snapshots(policy, state)
    )


class RdtReading(Protocol):
    """One RDT group's counters on one L3 cache id (`resctrl.MonSample` is one)."""

    @property
    def rdt_class(self) -> str: ...
    @property
    def rdt_mon_group(self) -> str: ...
    @property
    def cache_id(self) -> int: ...
    @property
    def llc_occupancy(self) -> int | None: ...
    @property
    def mbm_local_bytes(self) -> int | None: ...
    @property
    def mbm_total_bytes(self) -> int | None: ...


#: (metric name, RdtReading attribute, help), as goresctrl names and describes them
RDT_GAUGES = (
    ("nri_l3_llc_occupancy", "llc_occupancy", "L3 (LLC) occupancy"),
    (
        "nri_l3_mbm_local_bytes",
        "mbm_local_bytes",
        "bytes transferred to/from local memory through LLC",
    ),
    (
        "nri_l3_mbm_total_bytes",
        "mbm_total_bytes",
        "total bytes transferred to/from memory through LLC",
    ),
)
RDT_LABELS = ("cache_id", "rdt_class", "rdt_mon_group")


class _RdtCollector(Collector):
    """The RDT gauges, computed from `Metrics.rdt_refresh` at each scrape."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return ()  # nothing to read at registration

    def collect(self) -> Iterator[GaugeMetricFamily]:
        source = self._metrics.rdt_refresh
        readings = list(source()) if source is not None else []
        if not readings:
            return
        for name, attr, doc in RDT_GAUGES:
            family = GaugeMetricFamily(name, doc, labels=RDT_LABELS)
            for r in readings:
                value = getattr(r, attr)
                if value is not None:
                    family.add_metric([str(r.cache_id), r.rdt_class, r.rdt_mon_group], value)
            yield family


@dataclass(slots=True)
class HealthState:
    registered: bool = False
    synchronized: bool = False
    reason: str = "not connected to the runtime yet"

    @property
    def ready(self) -> bool:
        return self.registered and self.synchronized


class Metrics:
    """The daemon's metrics, in a registry of its own."""

    def __init__(self) -> None:
        #: called for a fresh state snapshot before every exposition (see the docstring)
        self.refresh: Callable[[], StateSnapshot] | None = None
        #: called for the RDT monitoring counters at every scrape (see the docstring)
        self.rdt_refresh: Callable[[], Iterable[RdtReading]] | None = None
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.events = Counter(
            "nri_resmgr_events", "NRI events handled", ["event", "outcome"], registry=r
        )
        self.latency = Histogram(
            "nri_resmgr_event_latency_seconds",
            "Time to handle an NRI event",
            ["event"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.errors = Counter(
            "nri_resmgr_errors", "Events answered with an error", ["event", "kind"], registry=r
        )
        self.pool_capacity = Gauge(
            "nri_resmgr_pool_cpu_capacity", "CPUs in a pool", ["pool"], registry=r
        )
        self.pool_shared = Gauge(
            "nri_resmgr_pool_shared_cpus", "CPUs left in a pool's shared set", ["pool"], registry=r
        )
        self.pool_exclusive = Gauge(
            "nri_resmgr_pool_exclusive_cpus", "CPUs granted exclusively", ["pool"], registry=r
        )
        self.pool_containers = Gauge(
            "nri_resmgr_pool_containers", "Containers placed in a pool", ["pool"], registry=r
        )
        self.containers = Gauge(
            "nri_resmgr_containers", "Live containers by CPU kind", ["kind"], registry=r
        )
        self.balloons = Gauge(
            "nri_resmgr_balloons", "Balloons by balloon type", ["type"], registry=r
        )
        self.balloon_cpus = Gauge(
            "nri_resmgr_balloon_cpus", "CPUs held by balloons of a type", ["type"], registry=r
        )
        self.balloon_containers = Gauge(
            "nri_resmgr_balloon_containers",
            "Containers in balloons of a type",
            ["type"],
            registry=r,
        )
        #: (event, error kind or None) -> its event counter, latency histogram and error
        #: counter (None when ok): the children `observe_event` counts through
        self._children: dict[tuple[str, str | None], tuple[Counter, Histogram, Counter | None]] = {}
        r.register(_RdtCollector(self))
        self.config_reloads = Counter(
            "nri_resmgr_config_reloads", "Configuration updates", ["outcome"], registry=r
        )

    def observe_event(self, event: str, seconds: float, *, error: str | None = None) -> None:
        """Count `event` (ok, or failed with `error`, its kind) and time it.

        The labelled children are kept per label set (`_children`): looking one up in
        prometheus_client checks and joins the label values under the metric's lock on
        every call, a few microseconds of every NRI event.  A child is the metric's own
        for its labels, so counting through the kept one is counting through `labels`.
        """
        key = (event, error)
        children = self._children.get(key)
        if children is None:
            children = (
                self.events.labels(event=event, outcome="error" if error else "ok"),
                self.latency.labels(event=event),
                self.errors.labels(event=event, kind=error) if error else None,
            )
            self._children[key] = children
        count, latency, failed = children
        count.inc()
        latency.observe(seconds)
        if failed is not None:
            failed.inc()

    def observe_state(self, snapshot: StateSnapshot) -> None:
        for gauge in (
            self.pool_capacity,
            self.pool_shared,
            self.pool_exclusive,
            self.pool_containers,
            self.containers,
            self.balloons,
            self.balloon_cpus,
            self.balloon_containers,
        ):
            gauge.clear()
        for pool in snapshot.pools:
            self.pool_capacity.labels(pool=pool.name).set(pool.capacity)
            self.pool_shared.labels(pool=pool.name).set(pool.shared)
            self.pool_exclusive.labels(pool=pool.name).set(pool.exclusive)
            self.pool_containers.labels(pool=pool.name).set(pool.containers)
        for kind, count in snapshot.containers_by_kind.items():
            self.containers.labels(kind=kind).set(count)
        per_type: dict[str, list[int]] = {}
        for b in snapshot.balloons:
            acc = per_type.setdefault(b.type, [0, 0, 0])
            acc[0] += 1
            acc[1] += b.cpu_count
            acc[2] += len(b.containers)
        for type_name, (count, cpus, containers) in sorted(per_type.items()):
            self.balloons.labels(type=type_name).set(count)
            self.balloon_cpus.labels(type=type_name).set(cpus)
            self.balloon_containers.labels(type=type_name).set(containers)

    def exposition(self) -> bytes:
        if self.refresh is not None:
            self.observe_state(self.refresh())
        return generate_latest(self.registry)


async def _respond(writer: asyncio.StreamWriter, status: str, ctype: str, body: bytes) -> None:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    writer.write(head.encode("ascii") + body)
    with contextlib.suppress(ConnectionError):
        await writer.drain()
    writer.close()


#: a read-only page: called per GET, returns (content type, body)
Page = Callable[[], tuple[str, bytes]]
#: a read-only page under a prefix: called per GET with the rest of the path (``/a/b``
#: under ``/a/`` is ``b``); returns (status, content type, body)
Lookup = Callable[[str], tuple[str, str, bytes]]


async def serve_http(
    metrics: Metrics,
    health: HealthState,
    *,
    host: str = "0.0.0.0",
    port: int = 8891,
    pages: Mapping[str, Page] | None = None,
    lookups: Mapping[str, Lookup] | None = None,
) -> asyncio.Server:
    """Serve /metrics, /healthz, /readyz, `pages` (path -> page) and `lookups` (path
    prefix ending in ``/`` -> lookup); returns the server."""
    pages = pages or {}
    lookups = lookups or {}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), timeout=5)
            parts = line.decode("latin-1").split()
            while (await asyncio.wait_for(reader.readline(), timeout=5)) not in (b"\r\n", b""):
                pass
        except (TimeoutError, ConnectionError, UnicodeDecodeError):
            writer.close()
            return
        if len(parts) < 2 or parts[0] not in ("GET", "HEAD"):
            await _respond(writer, "405 Method Not Allowed", "text/plain", b"GET only\n")
            return
        path = parts[1].split("?", 1)[0]
        if path == "/metrics":
            await _respond(writer, "200 OK", CONTENT_TYPE_LATEST, metrics.exposition())
        elif path == "/healthz":
            await _respond(writer, "200 OK", "text/plain", b"ok\n")
        elif path == "/readyz":
            if health.ready:
                await _respond(writer, "200 OK", "text/plain", b"ready\n")
            else:
                body = f"not ready: {health.reason}\n".encode()
                await _respond(writer, "503 Service Unavailable", "text/plain", body)
        elif path in pages:
            try:
                ctype, body = pages[path]()
            except Exception as exc:  # a page is best effort: report, keep serving
                body = f"{path}: {type(exc).__name__}: {exc}\n".encode()
                await _respond(writer, "500 Internal Server Error", "text/plain", body)
                return
            await _respond(writer, "200 OK", ctype, body)
        elif path.rpartition("/")[0] + "/" in lookups:
            prefix, _, rest = path.rpartition("/")
            try:
                status, ctype, body = lookups[prefix + "/"](urllib.parse.unquote(rest))
            except Exception as exc:  # best effort, as a page
                body = f"{path}: {type(exc).__name__}: {exc}\n".encode()
                status, ctype = "500 Internal Server Error", "text/plain"
            await _respond(writer, status, ctype, body)
        else:
            await _respond(writer, "404 Not Found", "text/plain", b"not found\n")

    return await asyncio.start_server(handle, host, port)
