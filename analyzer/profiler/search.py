"""`find_max_load`: the highest load whose latency percentile stays within a limit.

As Model Analyzer's parameter search (model_analyzer/result/parameter_search.py): double the
level from `start` while the measurement passes, stop doubling when throughput has saturated
(the best of the last 4 passing measurements gains under 5% over the first of them), then
binary-search between the last passing and the first failing level (at most
`max_binary_steps` steps). A level passes when its measurement is stable, had no failed
request, and its chosen percentile is within the limit.

`staged_search.search_staged` is the two-fidelity version (a short first pass, then full
windows only where the result is decided); both give a `SearchResult`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from analyzer.measurement import Measurement
from analyzer.profiler.level import LevelRun
from analyzer.profiler.sweep import CONCURRENCY, REQUEST_RATE, MeasureLevel, SweepSpec

SATURATION_TRIES = 4
SATURATION_MIN_GAIN = 0.05
# Past saturation more load adds only queueing: of the loads within the limit, the lowest one
# that reaches this share of the best throughput is where a config is operated, which leaves
# latency headroom for the noise of the machine that serves it.
SATURATION_SHARE = 0.95

SCOUT = "scout"  # a level measured with the short windows of a first pass
FULL = "full"  # a level measured with the caller's full windows

# (step, best throughput within the limit so far) -> True to stop the search now.
StepReport = Callable[[int, float], bool]


@dataclass(frozen=True, slots=True)
class SearchStep:
    """One level a search measured: with which windows (`SCOUT` or `FULL`), whether it
    passed, what it gave and how long it took (the warm-up and every window)."""

    level: float
    fidelity: str
    passed: bool
    seconds: float
    throughput: float = 0.0
    latency_us: float = 0.0  # at the search's percentile; 0 without a measurement


@dataclass(frozen=True, slots=True)
class SearchResult:
    """What `find_max_load` found.

    `best` is the passing measurement with the highest throughput (None when none passed),
    `max_level` the highest passing level, `measurements` every full-window measurement taken
    in order (passing or not), `reason` a sentence on how the search ended. A staged search
    also gives its first pass's short-window measurements (`scouted`: never judged against
    the limit on their own), and `stopped_early` when the caller's report stopped it after
    the first pass (then `best` is None). `steps` times every level measured.
    """

    best: Measurement | None
    max_level: float | None
    measurements: list[Measurement] = field(default_factory=list)
    reason: str = ""
    latency_limit_us: float = 0.0
    percentile: int = 95
    scouted: list[Measurement] = field(default_factory=list)
    stopped_early: bool = False
    steps: list[SearchStep] = field(default_factory=list)

    @property
    def found(self) -> bool:
        return self.best is not None


def passes(run: LevelRun, latency_limit_us: float, percentile: int) -> bool:
    """Whether a level counts as within the limit: measured, stable, no failed request, and
    its `percentile` latency at most `latency_limit_us`."""
    m = run.measurement
    return (
        m is not None
        and run.stable
        and not run.failure
        and m.error_count == 0
        and m.percentile_us(percentile) <= latency_limit_us
    )


def why_not(run: LevelRun, latency_limit_us: float, percentile: int) -> str:
    """Why `run` fails `passes`: its failure as given, else a sentence naming the level."""
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


def check_range(mode: str, start: int, max_level: int) -> None:
    """ValueError unless `mode` is concurrency or request rate and 1 <= start <= max_level."""
    if mode not in (CONCURRENCY, REQUEST_RATE):
        raise ValueError(f"mode must be {CONCURRENCY} or {REQUEST_RATE}, not {mode!r}")
    if start < 1 or max_level < start:
        raise ValueError(f"need 1 <= start <= max_level (got {start} and {max_level})")


async def timed(
    measure: MeasureLevel,
    spec: SweepSpec,
    level: int,
    fidelity: str,
    judge: Callable[[LevelRun], bool],
    percentile: int,
) -> tuple[LevelRun, SearchStep]:
    """Measure `level` and say how it went (`judge`: whether it passes)."""
    began = time.perf_counter()
    run = await measure(spec.level(level))
    m = run.measurement
    step = SearchStep(
        level=level,
        fidelity=fidelity,
        passed=judge(run),
        seconds=time.perf_counter() - began,
        throughput=m.throughput if m is not None else 0.0,
        latency_us=m.percentile_us(percentile) if m is not None else 0.0,
    )
    return run, step


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
    check_range(mode, start, max_level)
    spec = SweepSpec(mode=mode, start=start)
    runs: list[tuple[int, LevelRun]] = []
    steps: list[SearchStep] = []

    def judge(run: LevelRun) -> bool:
        return passes(run, latency_limit_us, percentile)

    async def measure_at(level: int) -> bool:
        run, step = await timed(measure, spec, level, FULL, judge, percentile)
        runs.append((level, run))
        steps.append(step)
        return step.passed

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
            reason = why_not(runs[-1][1], latency_limit_us, percentile)
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
        steps=steps,
    )


def _saturated(runs: list[tuple[int, LevelRun]], limit_us: float, percentile: int) -> bool:
    return throughput_saturated(
        [run.measurement.throughput if run.measurement else 0.0 for _, run in runs]
    )


def throughput_saturated(throughputs: Sequence[float], tries: int = SATURATION_TRIES) -> bool:
    """Model Analyzer's rule: over the last `tries` (4) levels, the best throughput gained
    less than 5% over the first of them."""
    if len(throughputs) < tries:
        return False
    recent = throughputs[-tries:]
    first = recent[0]
    if first <= 0:
        return False
    return (max(recent) - first) / first < SATURATION_MIN_GAIN


def operating_point(
    measurements: Sequence[Measurement], latency_limit_us: float, percentile: int
) -> Measurement | None:
    """Of the stable, error-free measurements within the limit, the lowest load that reaches
    `SATURATION_SHARE` of the best throughput among them (None when none is within)."""
    passing = [
        m
        for m in measurements
        if m.stable and m.error_count == 0 and m.percentile_us(percentile) <= latency_limit_us
    ]
    if not passing:
        return None
    top = max(m.throughput for m in passing)
    enough = [m for m in passing if m.throughput >= SATURATION_SHARE * top]
    return min(enough, key=lambda m: (m.concurrency or m.request_rate, -m.throughput))
