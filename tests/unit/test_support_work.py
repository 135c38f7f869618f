"""`tests.support.work`: the call counter the work bounds of the fuzz tests rest on."""

from __future__ import annotations

import sys

import pytest

from tests.support.work import WorkBoundExceeded, counting_calls


def _calls(n: int) -> None:
    for _ in range(n):
        _leaf()


def _leaf() -> None:
    pass


def test_it_counts_python_and_c_calls() -> None:
    with counting_calls() as calls:
        _calls(100)
    small = calls.count
    with counting_calls() as calls:
        _calls(1000)
    # one _calls frame, then one _leaf frame a round: 900 more rounds, 900 more calls
    assert calls.count - small == 900
    with counting_calls() as calls:
        sorted([3, 1, 2])
    assert calls.count >= 1  # a C function counts too


def test_a_limit_stops_the_block_past_except_exception() -> None:
    def swallowing() -> str:
        try:
            _calls(10_000)
        except Exception:
            return "swallowed"
        return "done"

    with (
        pytest.raises(WorkBoundExceeded, match="the loop: expected at most 50 calls"),
        counting_calls(limit=50, what="the loop"),
    ):
        swallowing()
    with counting_calls(limit=50_000) as calls:
        assert swallowing() == "done"
    assert 10_000 < calls.count <= 50_000


def test_the_profiler_before_is_put_back() -> None:
    assert sys.getprofile() is None
    with pytest.raises(WorkBoundExceeded), counting_calls(limit=1):
        _calls(5)
    assert sys.getprofile() is None
    with counting_calls():
        pass
    assert sys.getprofile() is None
