"""One load point of one model, measured with the analyzer's stable windows."""

from __future__ import annotations

from analyzer.api import measure
from analyzer.load.base import LoadLevel
from analyzer.load.options import LoadOptions
from analyzer.measurement import Measurement
from analyzer.profiler.settings import MeasureSettings
from tuner.gate.baseline_file import GateSettings, LoadPoint


def measure_point(url: str, model: str, concurrency: int, settings: GateSettings) -> LoadPoint:
    """Measure `model` at `concurrency`; AnalyzerError when no request succeeds."""
    measurement = measure(
        LoadOptions(url=url, model=model, batch_size=settings.batch_size, worker_processes=1),
        LoadLevel(concurrency=concurrency),
        MeasureSettings(
            measurement_interval_ms=settings.measurement_interval_ms,
            stability_percentage=settings.stability_percentage,
            max_trials=settings.max_trials,
            warmup_request_count=settings.warmup_request_count,
        ),
    )
    return to_point(measurement)


def to_point(m: Measurement) -> LoadPoint:
    return LoadPoint(
        concurrency=m.concurrency,
        throughput=m.throughput,
        p50_us=m.latency_p50_us,
        p95_us=m.latency_p95_us,
        p99_us=m.latency_p99_us,
        avg_us=m.latency_avg_us,
        request_count=m.request_count,
        error_count=m.error_count,
        stable=m.stable,
    )
