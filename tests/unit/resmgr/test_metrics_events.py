"""`Metrics.observe_event` counts every label set apart, whichever came first.

The event metrics' children are kept per (event, error kind) after their first use; these
interleave events, outcomes and error kinds so that a child kept under too coarse a key
(the event alone, or "failed" without its kind) would count into the wrong series.

The counting is plain Python and `nri_resmgr.ops.exposition` writes it as prometheus_client
would have: the last tests pin what differs most easily from prometheus_client's own
``Histogram`` and ``Counter`` (a value on a bucket bound is in that bucket, buckets are
cumulative, every series has its ``_created``, series are listed in the order first
counted, families in the order the registry used to list them).
"""

from __future__ import annotations

import pytest

from nri_resmgr.ops.metrics import LATENCY_BUCKETS, Metrics

#: (event, error kind or None, seconds), in the order observed
_OBSERVED = [
    ("CreateContainer", None, 0.0002),
    ("CreateContainer", "AllocationError", 0.003),
    ("RemoveContainer", None, 0.0001),
    ("CreateContainer", None, 0.0002),
    ("CreateContainer", "internal", 0.02),
    ("CreateContainer", "AllocationError", 0.003),
    ("CreateContainer", None, 0.0002),
]


def _value(metrics: Metrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


@pytest.fixture
def metrics() -> Metrics:
    m = Metrics()
    for event, error, seconds in _OBSERVED:
        m.observe_event(event, seconds, error=error)
    return m


@pytest.mark.parametrize(
    ("event", "outcome", "count"),
    [
        ("CreateContainer", "ok", 3),
        ("CreateContainer", "error", 3),
        ("RemoveContainer", "ok", 1),
        ("RemoveContainer", "error", 0),
    ],
    ids=["create-ok", "create-error", "remove-ok", "remove-error"],
)
def test_events_are_counted_per_event_and_outcome(
    metrics: Metrics, event: str, outcome: str, count: int
) -> None:
    assert _value(metrics, "nri_resmgr_events_total", event=event, outcome=outcome) == count


@pytest.mark.parametrize(
    ("kind", "count"),
    [("AllocationError", 2), ("internal", 1)],
    ids=["allocation", "internal"],
)
def test_errors_are_counted_per_kind(metrics: Metrics, kind: str, count: int) -> None:
    assert _value(metrics, "nri_resmgr_errors_total", event="CreateContainer", kind=kind) == count
    assert _value(metrics, "nri_resmgr_errors_total", event="RemoveContainer", kind=kind) == 0


def test_latency_is_observed_per_event(metrics: Metrics) -> None:
    name = "nri_resmgr_event_latency_seconds"
    assert _value(metrics, f"{name}_count", event="CreateContainer") == 6
    assert _value(metrics, f"{name}_count", event="RemoveContainer") == 1
    assert _value(metrics, f"{name}_sum", event="CreateContainer") == pytest.approx(0.0266)
    assert _value(metrics, f"{name}_sum", event="RemoveContainer") == pytest.approx(0.0001)


def test_separate_daemons_keep_separate_children() -> None:
    a, b = Metrics(), Metrics()
    a.observe_event("CreateContainer", 0.1)
    b.observe_event("CreateContainer", 0.1)
    b.observe_event("CreateContainer", 0.1, error="internal")
    ok = {"event": "CreateContainer", "outcome": "ok"}
    assert _value(a, "nri_resmgr_events_total", **ok) == 1
    assert _value(b, "nri_resmgr_events_total", **ok) == 1
    assert _value(a, "nri_resmgr_events_total", event="CreateContainer", outcome="error") == 0
    assert _value(b, "nri_resmgr_events_total", event="CreateContainer", outcome="error") == 1


def test_a_latency_on_a_bucket_bound_is_in_that_bucket_and_buckets_are_cumulative() -> None:
    m = Metrics()
    m.observe_event("CreateContainer", 0.001)  # exactly the second bound
    m.observe_event("CreateContainer", 0.0011)
    m.observe_event("CreateContainer", 3.0)  # above the last bound: +Inf only
    name = "nri_resmgr_event_latency_seconds_bucket"
    got = {le: _value(m, name, event="CreateContainer", le=le) for le in ("0.0005", "0.001")}
    assert got == {"0.0005": 0, "0.001": 1}
    assert _value(m, name, event="CreateContainer", le="0.0025") == 2
    assert _value(m, name, event="CreateContainer", le="2.0") == 2
    assert _value(m, name, event="CreateContainer", le="+Inf") == 3
    assert len(LATENCY_BUCKETS) == 12  # the bounds listed above are the configured ones


def test_every_counted_series_has_its_created_time() -> None:
    m = Metrics()
    m.observe_event("CreateContainer", 0.1, error="internal")
    m.count_config_reload("ok")
    for name, labels in [
        ("nri_resmgr_events_created", {"event": "CreateContainer", "outcome": "error"}),
        ("nri_resmgr_errors_created", {"event": "CreateContainer", "kind": "internal"}),
        ("nri_resmgr_event_latency_seconds_created", {"event": "CreateContainer"}),
        ("nri_resmgr_config_reloads_created", {"outcome": "ok"}),
    ]:
        assert _value(m, name, **labels) > 1.7e9, name  # a Unix time, not a count


def test_configuration_updates_are_counted_per_outcome() -> None:
    m = Metrics()
    for outcome in ("ok", "error", "ok"):
        m.count_config_reload(outcome)
    assert _value(m, "nri_resmgr_config_reloads_total", outcome="ok") == 2
    assert _value(m, "nri_resmgr_config_reloads_total", outcome="error") == 1


def test_series_and_families_are_listed_as_prometheus_client_listed_them() -> None:
    m = Metrics()
    m.observe_event("RemoveContainer", 0.1)
    m.observe_event("CreateContainer", 0.1, error="internal")
    m.observe_event("CreateContainer", 0.1)
    lines = m.exposition().decode().splitlines()
    totals = [line.split(" ")[0] for line in lines if line.startswith("nri_resmgr_events_total")]
    assert totals == [
        'nri_resmgr_events_total{event="RemoveContainer",outcome="ok"}',
        'nri_resmgr_events_total{event="CreateContainer",outcome="error"}',
        'nri_resmgr_events_total{event="CreateContainer",outcome="ok"}',
    ]
    types = [line.split(" ")[2] for line in lines if line.startswith("# TYPE")]
    assert types == [
        "nri_resmgr_events_total",
        "nri_resmgr_events_created",
        "nri_resmgr_event_latency_seconds",
        "nri_resmgr_event_latency_seconds_created",
        "nri_resmgr_errors_total",
        "nri_resmgr_errors_created",
        "nri_resmgr_pool_cpu_capacity",
        "nri_resmgr_pool_shared_cpus",
        "nri_resmgr_pool_exclusive_cpus",
        "nri_resmgr_pool_containers",
        "nri_resmgr_containers",
        "nri_resmgr_balloons",
        "nri_resmgr_balloon_cpus",
        "nri_resmgr_balloon_containers",
        "nri_resmgr_config_reloads_total",
    ]
