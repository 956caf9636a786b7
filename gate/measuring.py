"""One load point of one model, measured with the analyzer's stable windows."""

from __future__ import annotations

from analyzer.api import (
    AnalyzerError,
    LoadLevel,
    LoadOptions,
    Measurement,
    MeasureSettings,
    measure,
)
from gate.baseline_file import GateSettings, LoadPoint


def measure_point(url: str, model: str, concurrency: int, settings: GateSettings) -> LoadPoint:
    """Measure `model` at `concurrency`. A measurement that fails (typically a window in which
    no request completed, on a stalled machine) is tried once more; AnalyzerError, naming the
    model and load, when that fails too."""
    options = LoadOptions(
        url=url,
        model=model,
        protocol=settings.protocol,
        batch_size=settings.batch_size,
        worker_processes=1,
    )
    measure_settings = MeasureSettings(
        measurement_interval_ms=settings.measurement_interval_ms,
        stability_percentage=settings.stability_percentage,
        max_trials=settings.max_trials,
        warmup_request_count=settings.warmup_request_count,
    )
    try:
        return to_point(measure(options, LoadLevel(concurrency=concurrency), measure_settings))
    except AnalyzerError:
        pass
    try:
        return to_point(measure(options, LoadLevel(concurrency=concurrency), measure_settings))
    except AnalyzerError as exc:
        raise AnalyzerError(f"measuring {model} @ concurrency {concurrency}: {exc}") from None


def to_point(m: Measurement) -> LoadPoint:
    """The baseline's form of a measurement (same units: inferences/s, microseconds)."""
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
