"""`autotune baseline`'s work: measure every model at every load and describe the machine.

Each load is measured `settings.baseline_repeats` times and the median of each metric is
recorded: a lucky (or unlucky) run on a noisy machine would otherwise set the bar for every
gate that follows."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from tuner.gate.baseline_file import Baseline, GateSettings, LoadPoint, ModelBaseline
from tuner.gate.machine import describe_machine
from tuner.gate.measuring import measure_point
from tuner.gate.server import ServedModel


def record_baseline(
    url: str,
    models: Sequence[ServedModel],
    concurrencies: Sequence[int],
    settings: GateSettings,
    say: Callable[[str], None] = lambda _text: None,
) -> Baseline:
    """Measure each model at each concurrency (AnalyzerError when one cannot be measured)."""
    recorded = []
    for model in models:
        loads = []
        for concurrency in concurrencies:
            point = median_of(
                [
                    measure_point(url, model.name, concurrency, settings)
                    for _ in range(settings.baseline_repeats)
                ]
            )
            say(
                f"{model.name} @ concurrency {concurrency}: {point.throughput:,.1f} infer/s, "
                f"p50 {point.p50_us / 1000:.2f} ms, p95 {point.p95_us / 1000:.2f} ms, "
                f"p99 {point.p99_us / 1000:.2f} ms" + ("" if point.stable else " (unstable)")
            )
            loads.append(point)
        recorded.append(ModelBaseline(model.name, model.version, model.config_sha256, loads))
    return Baseline(
        recorded_at=datetime.now(UTC).isoformat(timespec="seconds"),
        machine=describe_machine(),
        settings=settings,
        models=recorded,
    )


def median_of(points: Sequence[LoadPoint]) -> LoadPoint:
    """Each metric's median over the repeats (counts summed; stable only if all were)."""
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
