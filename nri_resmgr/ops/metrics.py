"""Prometheus metrics and the health endpoints.

Theory of operation: one `Metrics` object per daemon counts what the metrics report (no
process-global registry, so tests and several daemons in one process never collide).
The pipeline shell calls `observe_event` around every NRI event: each labelled series is
a plain number (`Series`, and `LatencySeries`'s buckets), kept per label set in insertion
order, as prometheus_client keeps a metric's children; every count and every scrape runs
on the daemon's event loop (the pipeline's events, its reconfiguration, the Kubernetes
side's live reload, the HTTP shell), so the numbers need no lock.  The allocation gauges
are replaced wholesale from a snapshot, so a gauge can never drift from the state it
describes: `refresh`, when set, is called for a fresh snapshot at every scrape (a
snapshot walks every live container, so it is kept off the event path), and
`observe_state` sets one directly.  A policy with balloons (its ``balloons(state)`` hook,
read by `balloon_snapshots`) adds ``nri_resmgr_balloons``, ``nri_resmgr_balloon_cpus``
and ``nri_resmgr_balloon_containers``, per balloon type.  RDT monitoring counters are
read at scrape time too: `rdt_refresh`, when set, returns `RdtReading` values that become
the gauges nri-plugins exports (`nri_resmgr.ops.exposition` names them).  `HealthState`
holds the two facts the probes report: the daemon is alive (`/healthz`) and it is
registered with the runtime and synchronized (`/readyz`).
`serve_http` is the asyncio HTTP shell for `/metrics`, `/healthz` and `/readyz`, and for
any read-only `pages` the daemon adds (the node picture, `nri_resmgr.view.pages`).

Start-up cost: prometheus_client imports its whole HTTP exposition stack (http.server,
http.client, urllib.request, email, wsgiref, ...; 36 modules, about 2 MiB of the
daemon's RSS), which a daemon without an HTTP endpoint never uses.  So the counting here
is plain Python, and `nri_resmgr.ops.exposition` (the one module that imports
prometheus_client) turns it into metric families when the metrics are first read:
`scrape` (a `/metrics` request) or `registry`.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from nri_resmgr.model import Assignment, CPUKind, PolicyState
from nri_resmgr.policy.base import Policy

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

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


@dataclass(slots=True)
class HealthState:
    registered: bool = False
    synchronized: bool = False
    reason: str = "not connected to the runtime yet"

    @property
    def ready(self) -> bool:
        return self.registered and self.synchronized


class Series:
    """One labelled series' value, and when it was first counted (its ``_created``)."""

    __slots__ = ("created", "value")

    def __init__(self) -> None:
        self.value = 0.0
        self.created = time.time()


class LatencySeries:
    """One labelled histogram: per-bucket counts (the last is ``+Inf``), their sum, and
    when it was first observed."""

    __slots__ = ("buckets", "created", "total")

    def __init__(self) -> None:
        self.buckets = [0] * (len(LATENCY_BUCKETS) + 1)
        self.total = 0.0
        self.created = time.time()

    def observe(self, seconds: float) -> None:
        # the first bucket whose bound is at least `seconds` (prometheus' "le")
        self.buckets[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.total += seconds


#: one (event, error kind) pair's event count, latency and error count (None when ok)
_EventSeries = tuple[Series, LatencySeries, Series | None]


class Metrics:
    """The daemon's metrics: counted here, exposed by `nri_resmgr.ops.exposition`."""

    #: the latency histogram's bucket bounds, in seconds
    latency_bounds = LATENCY_BUCKETS

    def __init__(self) -> None:
        #: called for a fresh state snapshot before every exposition (see the docstring)
        self.refresh: Callable[[], StateSnapshot] | None = None
        #: called for the RDT monitoring counters at every scrape (see the docstring)
        self.rdt_refresh: Callable[[], Iterable[RdtReading]] | None = None
        #: (event, outcome) -> NRI events handled
        self.events: dict[tuple[str, str], Series] = {}
        #: event -> time to handle it
        self.latency: dict[str, LatencySeries] = {}
        #: (event, error kind) -> events answered with an error
        self.errors: dict[tuple[str, str], Series] = {}
        #: outcome (ok, error) -> configuration updates
        self.config_reloads: dict[str, Series] = {}
        #: what the allocation gauges show (`observe_state`)
        self.state = StateSnapshot()
        #: (event, error kind or None) -> its event count, latency and error count (None
        #: when ok): the series `observe_event` counts into, found with one lookup
        self._children: dict[tuple[str, str | None], _EventSeries] = {}
        self._registry: CollectorRegistry | None = None

    def observe_event(self, event: str, seconds: float, *, error: str | None = None) -> None:
        """Count `event` (ok, or failed with `error`, its kind) and time it.

        The series are kept per label set (`_children`), made at their first use in the
        order prometheus_client would make its children, so a scrape lists them alike.
        """
        key = (event, error)
        children = self._children.get(key)
        if children is None:
            outcome = "error" if error else "ok"
            children = (
                self.events.setdefault((event, outcome), Series()),
                self.latency.setdefault(event, LatencySeries()),
                self.errors.setdefault((event, error), Series()) if error else None,
            )
            self._children[key] = children
        count, latency, failed = children
        count.value += 1
        latency.observe(seconds)
        if failed is not None:
            failed.value += 1

    def count_config_reload(self, outcome: str) -> None:
        """Count one configuration update, ``ok`` or ``error``."""
        self.config_reloads.setdefault(outcome, Series()).value += 1

    def observe_state(self, snapshot: StateSnapshot) -> None:
        """Show `snapshot` in the allocation gauges (replacing what they showed)."""
        self.state = snapshot

    @property
    def registry(self) -> CollectorRegistry:
        """A prometheus_client registry reading these metrics (made at first use)."""
        if self._registry is None:
            # prometheus_client only when the metrics are read (module docstring)
            from nri_resmgr.ops.exposition import registry_of

            self._registry = registry_of(self)
        return self._registry

    def scrape(self) -> tuple[str, bytes]:
        """The content type and body of a ``/metrics`` reply (a fresh snapshot first)."""
        if self.refresh is not None:
            self.observe_state(self.refresh())
        from nri_resmgr.ops.exposition import CONTENT_TYPE, render

        return CONTENT_TYPE, render(self.registry)

    def exposition(self) -> bytes:
        """The body of a ``/metrics`` reply (`scrape`)."""
        return self.scrape()[1]


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
            ctype, body = metrics.scrape()
            await _respond(writer, "200 OK", ctype, body)
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
