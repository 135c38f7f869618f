"""`Metrics.observe_event` counts every label set apart, whichever came first.

The event metrics' children are kept per (event, error kind) after their first use; these
interleave events, outcomes and error kinds so that a child kept under too coarse a key
(the event alone, or "failed" without its kind) would count into the wrong series.
"""

from __future__ import annotations

import pytest

from nri_resmgr.ops.metrics import Metrics

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
