"""The highest total request rate a server sustains under a traffic mix.

Several models are loaded at once, each at its share of a total rate R (perf_analyzer's
request-rate mode, one load per model, all running together in one event loop), and the
search looks for the highest R at which every model's latency percentile stays within the
limit. The search is `search.search_max_load`'s (doubling, then binary search at the
boundary) run over the mix as a whole: one level of it is R, its measurement the mix's
combined one (`combine`): the throughputs added up, each latency percentile the worst
model's, stable only when every model's level is. So a level passes exactly when every model
passes at its own rate.
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace

from analyzer.load.base import LoadLevel
from analyzer.measurement import Measurement
from analyzer.profiler.level import LevelRun
from analyzer.profiler.search import SearchResult, search_max_load
from analyzer.profiler.settings import MeasureSettings
from analyzer.profiler.sweep import REQUEST_RATE

MIX_MODEL = "mix"  # the model name of the combined measurement
# Without a start rate, the search starts where every model gets this many requests per
# measurement window: with fewer, one request more or less in a window moves its throughput
# past the stability threshold, and a percentile is one of a handful of samples.
MIN_REQUESTS_PER_WINDOW = 16

# Measures one model of the mix at its own level (its session's `measure_settling`).
MeasureModel = Callable[[LoadLevel], Awaitable[LevelRun]]


@dataclass(frozen=True, slots=True)
class MixedLevel:
    """One total rate of the search and each model's run at its share of it."""

    total_rate: float
    runs: Mapping[str, LevelRun]


@dataclass(frozen=True, slots=True)
class MixedSearchResult:
    """What the mixed-load search found.

    `search` is the search over the mix as a whole (its measurements are the combined ones,
    model "mix", `request_rate` the total rate); `levels` every total rate measured, in
    order, with each model's own run; `shares` the models' shares of the total."""

    search: SearchResult
    levels: list[MixedLevel] = field(default_factory=list)
    shares: Mapping[str, float] = field(default_factory=dict)

    def models_at(self, total_rate: float) -> dict[str, Measurement]:
        """Each model's measurement at `total_rate` (the last time it was measured)."""
        found: dict[str, Measurement] = {}
        for level in self.levels:
            if level.total_rate == total_rate:
                found = {
                    model: run.measurement
                    for model, run in level.runs.items()
                    if run.measurement is not None
                }
        return found


def validate_shares(shares: Mapping[str, float]) -> dict[str, float]:
    """The shares as fractions of 1 (each > 0); ValueError naming the model otherwise."""
    if not shares:
        raise ValueError("a traffic mix needs at least one model")
    for model, share in shares.items():
        if not math.isfinite(share) or share <= 0:
            raise ValueError(f"the share of '{model}' must be a number > 0, not {share!r}")
    total = sum(shares.values())
    return {model: share / total for model, share in shares.items()}


def start_rate(shares: Mapping[str, float], settings: MeasureSettings) -> int:
    """The lowest total rate at which every model gets MIN_REQUESTS_PER_WINDOW requests per
    measurement window (time windows; count windows wait for their requests anyway)."""
    window_s = settings.measurement_interval_ms / 1000.0
    return max(1, math.ceil(MIN_REQUESTS_PER_WINDOW / (min(shares.values()) * window_s)))


def model_settings(settings: MeasureSettings, share: float, limit_us: float) -> MeasureSettings:
    """How one model of the mix is measured: its warmup scaled to its share of the rate (a
    small share would otherwise wait long for it), and its windows cut short once the
    average latency reaches the limit (perf_analyzer's -l: a level whose average is over the
    limit has its percentiles over it too). Stability stays judged on the average latency, as
    `settings` says: a small share's percentile over a few requests per window rarely
    settles."""
    return replace(
        settings,
        warmup_request_count=math.ceil(settings.warmup_request_count * share),
        latency_threshold_ms=limit_us / 1000.0,
    )


async def search_mixed_load(
    measures: Mapping[str, MeasureModel],
    shares: Mapping[str, float],
    *,
    latency_limit_us: float,
    percentile: int = 95,
    start: int = 1,
    max_rate: int = 65_536,
    max_binary_steps: int = 5,
) -> MixedSearchResult:
    """Search the highest total rate within the limit; `measures[model]` measures one model
    at its level, `shares` (fractions of 1, as `validate_shares` gives) split the total."""
    if set(measures) != set(shares):
        raise ValueError(f"models to measure {sorted(measures)} differ from {sorted(shares)}")
    levels: list[MixedLevel] = []

    async def measure_mix(level: LoadLevel) -> LevelRun:
        total = level.request_rate
        models = list(measures)
        runs = await asyncio.gather(
            *(measures[m](LoadLevel(request_rate=total * shares[m])) for m in models)
        )
        by_model = dict(zip(models, runs, strict=True))
        levels.append(MixedLevel(total, by_model))
        return combine(level, by_model, percentile)

    search = await search_max_load(
        measure_mix,
        latency_limit_us=latency_limit_us,
        percentile=percentile,
        mode=REQUEST_RATE,
        start=start,
        max_level=max_rate,
        max_binary_steps=max_binary_steps,
    )
    return MixedSearchResult(search, levels, dict(shares))


def combine(level: LoadLevel, runs: Mapping[str, LevelRun], percentile: int) -> LevelRun:
    """The mix's run at `level` (the total rate) from each model's run at its share."""
    failures = [f"{model}: {run.failure}" for model, run in runs.items() if run.failure]
    measured = {m: run.measurement for m, run in runs.items() if run.measurement is not None}
    stable = all(run.stable for run in runs.values())
    combined = None
    if not failures and len(measured) == len(runs):
        combined = _combined_measurement(level, measured, stable)
    return LevelRun(
        level=level,
        measurement=combined,
        stable=stable and not failures,
        within_threshold=all(run.within_threshold for run in runs.values()),
        failure="; ".join(failures),
        errors=sum((run.errors for run in runs.values()), Counter()),
    )


def _combined_measurement(
    level: LoadLevel, measured: Mapping[str, Measurement], stable: bool
) -> Measurement:
    """Throughputs and counts added up, each percentile the worst model's, the average
    weighted by each model's completed requests."""
    parts = list(measured.values())
    requests = sum(m.request_count for m in parts)
    errors: Counter[str] = Counter()
    for model, m in measured.items():
        errors.update({f"{model}: {text}": count for text, count in m.errors.items()})
    extra_keys = set.intersection(*(set(m.extra_percentiles_us) for m in parts))
    return Measurement(
        model=MIX_MODEL,
        concurrency=0,
        request_rate=level.request_rate,
        batch_size=1,
        throughput=sum(m.throughput for m in parts),
        request_throughput=sum(m.request_throughput for m in parts),
        request_count=requests,
        error_count=sum(m.error_count for m in parts),
        errors=dict(errors),
        latency_avg_us=sum(m.latency_avg_us * m.request_count for m in parts) / max(requests, 1),
        latency_p50_us=max(m.latency_p50_us for m in parts),
        latency_p90_us=max(m.latency_p90_us for m in parts),
        latency_p95_us=max(m.latency_p95_us for m in parts),
        latency_p99_us=max(m.latency_p99_us for m in parts),
        extra_percentiles_us={p: max(m.extra_percentiles_us[p] for m in parts) for p in extra_keys},
        stable=stable,
        windows=max(m.windows for m in parts),
        window_seconds=min(m.window_seconds for m in parts),
        send_rate=sum(m.send_rate for m in parts),
        in_flight=sum(m.in_flight for m in parts),
        warnings=tuple(f"{model}: {w}" for model, m in measured.items() for w in m.warnings),
    )
