"""Latency summaries as perf_analyzer computes them.

perf_analyzer sorts the latencies and takes, for percentile p, the element at index
`int(p / 100 * (n - 1) + 0.5)`: the sample nearest to the rank p% along the sorted list
(src/inference_profiler.cc, SummarizeLatency). No interpolation: every value reported is a
latency that some request had.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

REPORTED_PERCENTILES = (50, 90, 95, 99)


def percentile_index(percentile: float, count: int) -> int:
    """Index of the `percentile` value in a sorted list of `count` samples."""
    if count <= 0:
        raise ValueError("no samples")
    if not 0 <= percentile <= 100:
        raise ValueError(f"percentile {percentile} is outside 0..100")
    return int(percentile / 100.0 * (count - 1) + 0.5)


def percentile_of_sorted(values: Sequence[int], percentile: float) -> int:
    """The nearest-rank `percentile` of already sorted `values`."""
    return values[percentile_index(percentile, len(values))]


def mean_and_std(values: Sequence[int]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single sample)."""
    count = len(values)
    if count == 0:
        raise ValueError("no samples")
    mean = sum(values) / count
    if count == 1:
        return mean, 0.0
    variance = sum((v - mean) ** 2 for v in values) / (count - 1)
    return mean, math.sqrt(variance)


def percentiles_of(sorted_values: Sequence[int], extra: int | None = None) -> dict[int, int]:
    """p50, p90, p95, p99 (and `extra`) of sorted values, keyed by percentile, ascending."""
    wanted = set(REPORTED_PERCENTILES)
    if extra is not None:
        wanted.add(extra)
    return {p: percentile_of_sorted(sorted_values, p) for p in sorted(wanted)}
