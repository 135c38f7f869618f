"""The daemon's metrics as Prometheus metric families: the one module importing prometheus_client.

Theory of operation: `nri_resmgr.ops.metrics.Metrics` counts in plain Python, so that a
daemon whose metrics nobody reads never imports prometheus_client (its package imports
its whole HTTP exposition stack).  This module is imported when the metrics are first
read (`Metrics.scrape`, `Metrics.registry`): `registry_of` gives a `Metrics` a registry
of its own holding one collector, and every collection turns the current numbers into
the families prometheus_client's own ``Counter``, ``Histogram`` and ``Gauge`` would
expose, in the same order, with the same names, help texts, label sets (in the order
first counted) and ``_created`` series (switched off, as prometheus_client does, by
``PROMETHEUS_DISABLE_CREATED_SERIES``; its ``_get_use_created``).  So ``/metrics`` reads
as it did when the counting was prometheus_client's.

The RDT gauges are those nri-plugins exports (goresctrl's collector with the ``nri``
prefix): ``nri_l3_llc_occupancy``, ``nri_l3_mbm_local_bytes`` and
``nri_l3_mbm_total_bytes``, labelled ``cache_id``, ``rdt_class`` and ``rdt_mon_group``.
The two bandwidth values are the kernel's running byte counts; they are gauges here, as
the project exports them, so their names carry no ``_total`` suffix.  They are read from
`Metrics.rdt_refresh` at each collection, never at registration.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

if TYPE_CHECKING:
    # values only: this module is imported by ops.metrics when the metrics are read
    from nri_resmgr.ops.metrics import Metrics, RdtReading, Series, StateSnapshot

__all__ = ["CONTENT_TYPE", "RDT_GAUGES", "RDT_LABELS", "registry_of", "render"]

#: the content type of `render`'s text (Prometheus text format 0.0.4)
CONTENT_TYPE = CONTENT_TYPE_LATEST

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

#: whether counters and histograms carry ``_created`` series (prometheus_client's rule)
_CREATED = os.environ.get("PROMETHEUS_DISABLE_CREATED_SERIES", "False").lower() not in (
    "true",
    "1",
    "t",
)


def registry_of(metrics: Metrics) -> CollectorRegistry:
    """A registry of its own for `metrics`, read at every collection."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(_Families(metrics))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    """The Prometheus text of everything `registry` collects now."""
    return generate_latest(registry)


class _Families(Collector):
    """Every family of one `Metrics`, in the order its registry used to list them."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def describe(self) -> Iterable[Metric]:
        return ()  # nothing to read at registration (the RDT counters are read at scrape)

    def collect(self) -> Iterator[Metric]:
        m = self._metrics
        yield _counter(
            "nri_resmgr_events", "NRI events handled", ("event", "outcome"), m.events.items()
        )
        yield _latency(m)
        yield _counter(
            "nri_resmgr_errors",
            "Events answered with an error",
            ("event", "kind"),
            m.errors.items(),
        )
        yield from _state_gauges(m.state)
        if m.rdt_refresh is not None:
            yield from _rdt_gauges(list(m.rdt_refresh()))
        reloads = [((outcome,), series) for outcome, series in m.config_reloads.items()]
        yield _counter("nri_resmgr_config_reloads", "Configuration updates", ("outcome",), reloads)


def _counter(
    name: str, doc: str, labels: tuple[str, ...], series: Iterable[tuple[Sequence[str], Series]]
) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=labels)
    for values, one in series:
        family.add_metric(values, one.value, created=one.created if _CREATED else None)
    return family


def _latency(metrics: Metrics) -> HistogramMetricFamily:
    name = "nri_resmgr_event_latency_seconds"
    family = HistogramMetricFamily(name, "Time to handle an NRI event", labels=("event",))
    # prometheus_client's own spelling of a bound ("0.0005", "1.0"; untyped there)
    bounds = [floatToGoString(b) for b in metrics.latency_bounds]  # type: ignore[no-untyped-call]
    bounds.append("+Inf")
    for event, series in metrics.latency.items():
        cumulative, buckets = 0, []
        for le, count in zip(bounds, series.buckets, strict=True):
            cumulative += count
            buckets.append((le, float(cumulative)))
        family.add_metric([event], buckets, series.total)
        if _CREATED:
            family.samples.append(Sample(f"{name}_created", {"event": event}, series.created))
    return family


def _gauge(name: str, doc: str, label: str, values: Mapping[str, float]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=(label,))
    for key, value in values.items():
        family.add_metric([key], float(value))
    return family


def _state_gauges(state: StateSnapshot) -> Iterator[GaugeMetricFamily]:
    """The allocation gauges of one snapshot (a pool named twice: its last values)."""
    pools = state.pools
    yield _gauge(
        "nri_resmgr_pool_cpu_capacity",
        "CPUs in a pool",
        "pool",
        {p.name: p.capacity for p in pools},
    )
    yield _gauge(
        "nri_resmgr_pool_shared_cpus",
        "CPUs left in a pool's shared set",
        "pool",
        {p.name: p.shared for p in pools},
    )
    yield _gauge(
        "nri_resmgr_pool_exclusive_cpus",
        "CPUs granted exclusively",
        "pool",
        {p.name: p.exclusive for p in pools},
    )
    yield _gauge(
        "nri_resmgr_pool_containers",
        "Containers placed in a pool",
        "pool",
        {p.name: p.containers for p in pools},
    )
    yield _gauge(
        "nri_resmgr_containers", "Live containers by CPU kind", "kind", state.containers_by_kind
    )
    per_type: dict[str, tuple[int, int, int]] = {}
    for b in state.balloons:
        count, cpus, containers = per_type.get(b.type, (0, 0, 0))
        per_type[b.type] = (count + 1, cpus + b.cpu_count, containers + len(b.containers))
    by_type = sorted(per_type.items())
    yield _gauge(
        "nri_resmgr_balloons", "Balloons by balloon type", "type", {t: v[0] for t, v in by_type}
    )
    yield _gauge(
        "nri_resmgr_balloon_cpus",
        "CPUs held by balloons of a type",
        "type",
        {t: v[1] for t, v in by_type},
    )
    yield _gauge(
        "nri_resmgr_balloon_containers",
        "Containers in balloons of a type",
        "type",
        {t: v[2] for t, v in by_type},
    )


def _rdt_gauges(readings: list[RdtReading]) -> Iterator[GaugeMetricFamily]:
    """The RDT gauges of `readings` (none at all without readings)."""
    if not readings:
        return
    for name, attr, doc in RDT_GAUGES:
        family = GaugeMetricFamily(name, doc, labels=RDT_LABELS)
        for r in readings:
            value = getattr(r, attr)
            if value is not None:
                family.add_metric([str(r.cache_id), r.rdt_class, r.rdt_mon_group], value)
        yield family
