"""The statistic that sums up the runs of a load, on both sides of the gate.

The baseline records, for each load, the median of its runs; the gate measures the same number
of runs and compares their median with it. Comparing like with like matters: the best of
several runs against a median would lean towards passing."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from gate.baseline_file import MEDIAN, STATISTICS, LoadPoint

__all__ = ["MEDIAN", "STATISTICS", "describe_runs", "median_of", "summarize"]


def median_of(points: Sequence[LoadPoint]) -> LoadPoint:
    """Each metric's median over the runs (counts summed; stable only if all were)."""
    if not points:
        raise ValueError("the median of no runs")
    return LoadPoint(
        concurrency=points[0].concurrency,
        throughput=statistics.median(p.throughput for p in points),
        p50_us=statistics.median(p.p50_us for p in points),
        p95_us=statistics.median(p.p95_us for p in points),
        p99_us=statistics.median(p.p99_us for p in points),
        avg_us=statistics.median(p.avg_us for p in points),
        request_count=sum(p.request_count for p in points),
        error_count=sum(p.error_count for p in points),
        stable=all(p.stable for p in points),
    )


def summarize(points: Sequence[LoadPoint], statistic: str = MEDIAN) -> LoadPoint:
    """The runs of one load summed up by `statistic` (one of STATISTICS)."""
    if statistic != MEDIAN:
        raise ValueError(f"unknown statistic {statistic!r} (known: {', '.join(STATISTICS)})")
    return median_of(points)


def describe_runs(statistic: str, runs: int, attempts: int = 1) -> str:
    """'median of 3 runs', 'median of 6 runs in 2 attempts', 'a single run'."""
    if runs == 1:
        return "a single run"
    text = f"{statistic} of {runs} runs"
    return text + (f" in {attempts} attempts" if attempts > 1 else "")
