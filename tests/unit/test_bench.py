"""The benchmark helpers that turn samples into numbers: percentiles and profile summaries."""

from __future__ import annotations

import pytest

from bench.profile import layer_of, parse, summarize
from bench.stats import percentile, summary_us


@pytest.mark.parametrize(
    ("q", "expected"),
    [(50, 50.0), (99, 99.0), (100, 100.0), (1, 1.0), (0, 1.0)],
    ids=["p50", "p99", "p100", "p1", "p0"],
)
def test_percentile_nearest_rank(q: float, expected: float) -> None:
    assert percentile([float(v) for v in range(100, 0, -1)], q) == expected


def test_percentile_of_nothing_is_an_error() -> None:
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)


def test_summary_is_in_microseconds() -> None:
    s = summary_us([1000, 2000, 3000])
    assert s == {"n": 3, "p50_us": 2.0, "p99_us": 3.0, "mean_us": 2.0}


RAW = """\
process 1:"python";<module> (noop.py:1);_run_once (/usr/lib/python3.11/asyncio/base_events.py:1845);select (/usr/lib/python3.11/selectors.py:451) 70
process 1:"python";<module> (noop.py:1);_run_once (/usr/lib/python3.11/asyncio/base_events.py:1845);_handle (/w/nri_api/transport.py:292);_dispatch (/w/nri_api/stub.py:882) 20
process 1:"python";<module> (noop.py:1);_run_once (/usr/lib/python3.11/asyncio/base_events.py:1845);_read_loop (/w/nri_api/transport.py:229);_process (/w/nri_api/transport.py:245);next_event (/w/nri_api/mux.py:80) 10
"""  # noqa: E501


def test_profile_drops_epoll_waits_and_splits_by_layer() -> None:
    summary = summarize(parse(RAW.splitlines()))
    assert summary["samples"] == 30
    layers = summary["layers"]
    assert layers == {
        "nri_api stub dispatch + hook": 20,
        "nri_api mux + ttrpc framing (sans-IO)": 10,
    }
    steps = summary["steps"]
    assert steps["handling: Trunk._handle (task per request)"] == 20  # type: ignore[index]
    assert steps["  stub _dispatch (decode, hook, encode)"] == 20  # type: ignore[index]
    assert steps["reading: Trunk._read_loop (recv + mux + ttrpc parse)"] == 10  # type: ignore[index]


def test_layer_of_unknown_code_is_other() -> None:
    assert layer_of("f", "/somewhere/else.py") == "other (interpreter, stdlib)"
