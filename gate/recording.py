"""`autotune baseline`'s work: measure every model at every load and describe the machine.

Each load is measured `settings.repeats` times and `settings.statistic` (the median) of each
metric is recorded: a lucky (or unlucky) run on a noisy machine would otherwise set the bar for
every gate that follows. The gate measures as many runs and compares the same statistic."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from gate.baseline_file import Baseline, GateSettings, ModelBaseline
from gate.machine import describe_machine
from gate.measuring import measure_point
from gate.server import ServedModel
from gate.statistic import describe_runs, summarize


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
            runs = [
                measure_point(url, model.name, concurrency, settings)
                for _ in range(settings.repeats)
            ]
            point = summarize(runs, settings.statistic)
            say(
                f"{model.name} @ concurrency {concurrency}: {point.throughput:,.1f} infer/s, "
                f"p50 {point.p50_us / 1000:.2f} ms, p95 {point.p95_us / 1000:.2f} ms, "
                f"p99 {point.p99_us / 1000:.2f} ms ({describe_runs(settings.statistic, len(runs))})"
                + ("" if point.stable else " (unstable)")
            )
            loads.append(point)
        recorded.append(ModelBaseline(model.name, model.version, model.config_sha256, loads))
    return Baseline(
        recorded_at=datetime.now(UTC).isoformat(timespec="seconds"),
        machine=describe_machine(),
        settings=settings,
        models=recorded,
    )
