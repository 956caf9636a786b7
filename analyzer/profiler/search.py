"""`find_max_load`: the highest load whose latency percentile stays within a limit.

As Model Analyzer's parameter search (model_analyzer/result/parameter_search.py): double the
level from `start` while the measurement passes, stop doubling when throughput has saturated
(the best of the last 4 passing measurements gains under 5% over the first of them), then
binary-search between the last passing and the first failing level (at most
`max_binary_steps` steps). A level passes when its measurement is stable, had no failed
request, and its chosen percentile is within the limit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from analyzer.measurement import Measurement
from analyzer.profiler.level import LevelRun
from analyzer.profiler.sweep import CONCURRENCY, REQUEST_RATE, MeasureLevel, SweepSpec

SATURATION_TRIES = 4
SATURATION_MIN_GAIN = 0.05


@dataclass(frozen=True, slots=True)
class SearchResult:
    """What `find_max_load` found.

    `best` is the passing measurement with the highest throughput (None when none passed),
    `max_level` the highest passing level, `measurements` every measurement taken in order
    (passing or not), `reason` a sentence on how the search ended.
    """

    best: Measurement | None
    max_level: float | None
    measurements: list[Measurement] = field(default_factory=list)
    reason: str = ""
    latency_limit_us: float = 0.0
    percentile: int = 95

    @property
    def found(self) -> bool:
        return self.best is not None


def passes(run: LevelRun, latency_limit_us: float, percentile: int) -> bool:
    m = run.measurement
    return (
        m is not None
        and run.stable
        and not run.failure
        and m.error_count == 0
        and m.percentile_us(percentile) <= latency_limit_us
    )


def _why_not(run: LevelRun, latency_limit_us: float, percentile: int) -> str:
    where = run.level.describe()
    m = run.measurement
    if run.failure or m is None:
        return run.failure or f"{where}: no measurement"
    if not run.stable:
        return f"{where}: could not obtain a stable measurement"
    if m.error_count:
        return f"{where}: {m.error_count} requests failed"
    return (
        f"{where}: p{percentile} latency {m.percentile_us(percentile) / 1000:.3f} ms is over "
        f"the limit of {latency_limit_us / 1000:.3f} ms"
    )


async def search_max_load(
    measure: MeasureLevel,
    *,
    latency_limit_us: float,
    percentile: int = 95,
    mode: str = CONCURRENCY,
    start: int = 1,
    max_level: int = 1024,
    max_binary_steps: int = 5,
) -> SearchResult:
    """Run the doubling-then-binary search with `measure` (see the module docstring)."""
    if mode not in (CONCURRENCY, REQUEST_RATE):
        raise ValueError(f"mode must be {CONCURRENCY} or {REQUEST_RATE}, not {mode!r}")
    if start < 1 or max_level < start:
        raise ValueError(f"need 1 <= start <= max_level (got {start} and {max_level})")
    spec = SweepSpec(mode=mode, start=start)
    runs: list[tuple[int, LevelRun]] = []

    async def measure_at(level: int) -> bool:
        run = await measure(spec.level(level))
        runs.append((level, run))
        return passes(run, latency_limit_us, percentile)

    last_pass: int | None = None
    first_fail: int | None = None
    reason = ""
    level = start
    while True:
        if await measure_at(level):
            last_pass = level
            if _saturated(runs, latency_limit_us, percentile):
                reason = "throughput stopped growing"
                break
            if level >= max_level:
                reason = f"reached the highest level searched ({max_level})"
                break
            level = min(level * 2, max_level)
        else:
            first_fail = level
            reason = _why_not(runs[-1][1], latency_limit_us, percentile)
            break

    if first_fail is not None and last_pass is not None:
        low, high = last_pass, first_fail
        for _ in range(max_binary_steps):
            middle = (low + high) // 2
            if middle in (low, high):
                break
            if await measure_at(middle):
                low = middle
            else:
                high = middle
        last_pass = low
        reason = f"the limit is crossed between {low} and {high}"

    passing = [
        run.measurement
        for _, run in runs
        if run.measurement is not None and passes(run, latency_limit_us, percentile)
    ]
    best = max(passing, key=lambda m: (m.throughput, -m.level), default=None)
    if best is None:
        reason = f"even the lowest level does not pass: {reason}"
    return SearchResult(
        best=best,
        max_level=float(last_pass) if last_pass is not None else None,
        measurements=[run.measurement for _, run in runs if run.measurement is not None],
        reason=reason,
        latency_limit_us=latency_limit_us,
        percentile=percentile,
    )


def _saturated(runs: list[tuple[int, LevelRun]], limit_us: float, percentile: int) -> bool:
    """Model Analyzer's rule: over the last 4 measurements, the best throughput gained less
    than 5% over the first one."""
    if len(runs) < SATURATION_TRIES:
        return False
    recent = [run.measurement for _, run in runs[-SATURATION_TRIES:]]
    first = recent[0]
    if first is None or first.throughput <= 0:
        return False
    best = max(m.throughput for m in recent if m is not None)
    return (best - first.throughput) / first.throughput < SATURATION_MIN_GAIN
