"""Small statistics helpers shared by the benchmarks."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100), nearest rank: the smallest value with at least q % of
    the values at or below it."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]


def summary_us(ns: Sequence[int]) -> dict[str, float]:
    """p50/p99/mean in microseconds."""
    us = [n / 1000 for n in ns]
    return {
        "n": len(us),
        "p50_us": round(percentile(us, 50), 1),
        "p99_us": round(percentile(us, 99), 1),
        "mean_us": round(statistics.fmean(us), 1),
    }
