"""Merging the stable windows of a level into one `Measurement`.

As perf_analyzer's MergePerfStatusReports: request counts and durations add up, latencies are
pooled and sorted before the percentiles are taken, client send/recv are averaged over every
request, the client overhead is the mean of the windows', and the server breakdown is the
counter delta over the merged windows.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from analyzer.load.base import LoadLevel
from analyzer.measurement import Measurement, ServerBreakdown
from analyzer.profiler.percentiles import mean_and_std, percentiles_of
from analyzer.profiler.server_stats import ServerCounters, breakdown, composing_breakdowns
from analyzer.profiler.window import Window


def merge_windows(
    windows: Sequence[Window],
    counters_start: ServerCounters | None,
    *,
    model: str,
    level: LoadLevel,
    batch_size: int,
    percentile: int | None,
    stable: bool,
    windows_taken: int,
    warnings: Sequence[str] = (),
) -> Measurement:
    """One `Measurement` from `windows` (all with at least one successful request).

    `counters_start` are the server counters at the start of the first window; the server
    breakdown is left unavailable when either end is missing.
    """
    ok = [record for window in windows for record in window.ok]
    if not ok:
        raise ValueError("no successful request to merge")
    latencies = sorted(record.latency_ns for record in ok)
    mean_ns, std_ns = mean_and_std(latencies)
    points = percentiles_of(latencies, percentile)
    duration_s = sum(window.duration_s for window in windows)
    errors: Counter[str] = Counter()
    for window in windows:
        errors.update(window.errors())
    sent = sum(window.sent for window in windows)
    scheduled = sum(window.schedule.sent for window in windows)
    delayed = sum(window.schedule.delayed for window in windows)

    server = ServerBreakdown()
    composing: dict[str, ServerBreakdown] = {}
    counters_end = windows[-1].counters_end
    if counters_start is not None and counters_end is not None:
        delta = counters_end.minus(counters_start)
        server = breakdown(delta)
        composing = composing_breakdowns(delta)

    extra = {p: v / 1000.0 for p, v in points.items() if p not in (50, 90, 95, 99)}
    return Measurement(
        model=model,
        concurrency=level.concurrency,
        request_rate=level.request_rate if not level.concurrency else 0.0,
        batch_size=batch_size,
        throughput=len(ok) * batch_size / duration_s,
        request_throughput=len(ok) / duration_s,
        request_count=len(ok),
        error_count=sum(errors.values()),
        errors=dict(errors.most_common()),
        latency_avg_us=mean_ns / 1000.0,
        latency_p50_us=points[50] / 1000.0,
        latency_p90_us=points[90] / 1000.0,
        latency_p95_us=points[95] / 1000.0,
        latency_p99_us=points[99] / 1000.0,
        extra_percentiles_us=extra,
        client_send_us=sum(r.send_ns for r in ok) / len(ok) / 1000.0,
        client_recv_us=sum(r.recv_ns for r in ok) / len(ok) / 1000.0,
        client_overhead_pct=sum(w.busy_pct for w in windows) / len(windows),
        server=server,
        stable=stable,
        windows=windows_taken,
        window_seconds=duration_s,
        latency_std_us=std_ns / 1000.0,
        send_rate=sent / duration_s if duration_s > 0 else 0.0,
        in_flight=windows[-1].in_flight_end,
        delayed_pct=100.0 * delayed / scheduled if scheduled else 0.0,
        warnings=tuple(warnings),
        composing=composing,
    )
