"""Server-side counters from the statistics extension, and the breakdown of their deltas.

perf_analyzer snapshots `GET /v2/models/{m}[/versions/{v}]/stats` at every window boundary and
reports, per successful request, the average of each duration over its own count (queue,
compute input/infer/output, cache hit/miss); the server's overhead is the success duration
minus queue and compute, floored at 0 (src/inference_profiler.cc, src/report_writer.cc).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Protocol

from analyzer.measurement import ServerBreakdown
from protocol.statistics import DURATION_FIELDS


@dataclass(frozen=True, slots=True)
class ServerCounters:
    """Cumulative counters of one model version (counts and nanoseconds)."""

    inference_count: int = 0
    execution_count: int = 0
    success_count: int = 0
    success_ns: int = 0
    fail_count: int = 0
    fail_ns: int = 0
    queue_count: int = 0
    queue_ns: int = 0
    compute_input_count: int = 0
    compute_input_ns: int = 0
    compute_infer_count: int = 0
    compute_infer_ns: int = 0
    compute_output_count: int = 0
    compute_output_ns: int = 0
    cache_hit_count: int = 0
    cache_hit_ns: int = 0
    cache_miss_count: int = 0
    cache_miss_ns: int = 0
    # An ensemble's composing models (name -> their counters), depth first; empty otherwise.
    composing: tuple[tuple[str, ServerCounters], ...] = ()

    def minus(self, earlier: ServerCounters) -> ServerCounters:
        """The counters accumulated since `earlier` (composing models matched by name; one
        missing from `earlier` counts from zero)."""
        before = dict(earlier.composing)
        composing = tuple(
            (name, counters.minus(before.get(name, ServerCounters())))
            for name, counters in self.composing
        )
        values: dict[str, Any] = {
            f.name: getattr(self, f.name) - getattr(earlier, f.name)
            for f in fields(self)
            if f.name != "composing"
        }
        return ServerCounters(**values, composing=composing)

    @classmethod
    def from_model_stats(cls, entry: Mapping[str, Any]) -> ServerCounters:
        """From one `model_stats` entry of the statistics extension's JSON."""
        values: dict[str, Any] = {
            "inference_count": int(entry.get("inference_count", 0)),
            "execution_count": int(entry.get("execution_count", 0)),
        }
        inference_stats = entry.get("inference_stats", {}) or {}
        for name in DURATION_FIELDS:
            duration = inference_stats.get(name, {}) or {}
            values[f"{name}_count"] = int(duration.get("count", 0))
            values[f"{name}_ns"] = int(duration.get("ns", 0))
        return cls(**values)


def select_model_stats(
    document: Mapping[str, Any], model: str, version: str
) -> Mapping[str, Any] | None:
    """The `model_stats` entry of `model` (`version`, or the highest version when "")."""
    entries = document.get("model_stats")
    if entries is None:
        entries = [document]  # already one entry
    candidates = [e for e in entries if e.get("name") == model]
    if version:
        candidates = [e for e in candidates if str(e.get("version", "")) == str(version)]
    if not candidates:
        return None

    def version_key(entry: Mapping[str, Any]) -> int:
        text = str(entry.get("version", ""))
        return int(text) if text.isdigit() else -1

    return max(candidates, key=version_key)


def composing_breakdowns(delta: ServerCounters) -> dict[str, ServerBreakdown]:
    """Each composing model's breakdown of an ensemble's counter delta (empty otherwise)."""
    return {name: breakdown(counters) for name, counters in delta.composing}


def breakdown(delta: ServerCounters) -> ServerBreakdown:
    """Average per-request server durations (us) of a counter delta."""

    def average_us(total_ns: int, count: int) -> float:
        return total_ns / count / 1000.0 if count > 0 else 0.0

    compute_count = delta.compute_input_count
    compute_ns = delta.compute_input_ns + delta.compute_infer_ns + delta.compute_output_ns
    compute_us = average_us(compute_ns, compute_count)
    queue_us = average_us(delta.queue_ns, delta.queue_count)
    cache_hit_us = average_us(delta.cache_hit_ns, delta.cache_hit_count)
    cache_miss_us = average_us(delta.cache_miss_ns, delta.cache_miss_count)
    total_us = average_us(delta.success_ns, delta.success_count)
    accounted = queue_us + compute_us + cache_hit_us + cache_miss_us
    return ServerBreakdown(
        request_count=delta.success_count,
        execution_count=delta.execution_count,
        inference_count=delta.inference_count,
        queue_us=queue_us,
        compute_input_us=average_us(delta.compute_input_ns, delta.compute_input_count),
        compute_infer_us=average_us(delta.compute_infer_ns, delta.compute_infer_count),
        compute_output_us=average_us(delta.compute_output_ns, delta.compute_output_count),
        overhead_us=max(0.0, total_us - accounted),
        total_us=total_us,
        cache_hit_us=cache_hit_us,
        cache_miss_us=cache_miss_us,
        available=True,
    )


class StatisticsSource(Protocol):
    """Where the measurer gets server counters; `None` when the server gives none."""

    async def snapshot(self) -> ServerCounters | None: ...
