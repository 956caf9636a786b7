"""perf_analyzer's stability rule over the last measurement windows.

A level is stable when the last `window` measurements all produced requests and, for both
throughput and latency, max / min <= 1 + threshold (src/inference_profiler.cc,
IsInferWindowStable / IsLatencyWindowStable). The latency is the average, or the
`--percentile` value when one is given.
"""

from __future__ import annotations

from collections.abc import Sequence


def spread_within(values: Sequence[float], threshold_pct: float) -> bool:
    """max / min of `values` is at most 1 + threshold_pct / 100 (all values positive)."""
    low = min(values)
    high = max(values)
    if low <= 0:
        return False
    return high / low <= 1.0 + threshold_pct / 100.0


def is_stable(
    throughputs: Sequence[float],
    latencies: Sequence[float],
    threshold_pct: float,
    window: int = 3,
    check_latency: bool = True,
) -> bool:
    """Whether the last `window` (throughput, latency) pairs are stable."""
    if len(throughputs) < window or len(latencies) < window:
        return False
    recent_throughputs = throughputs[-window:]
    if any(t <= 0 for t in recent_throughputs):
        return False
    if not spread_within(recent_throughputs, threshold_pct):
        return False
    return not check_latency or spread_within(latencies[-window:], threshold_pct)


def any_over_threshold(latencies: Sequence[float], threshold: float, window: int = 3) -> bool:
    """perf_analyzer stops taking windows once one of the last `window` latencies reaches the
    latency threshold (IsDoneProfiling); only checked once `window` windows exist."""
    if threshold <= 0 or len(latencies) < window:
        return False
    return any(latency >= threshold for latency in latencies[-window:])
