"""Sweeps over load levels as perf_analyzer runs them.

Linear: from `start` by `step` to `end` (end None: `start` only; end 0: until the latency
threshold). The sweep stops at the first level that is unstable or whose latency (average, or
--percentile) reaches -l. Binary (--binary-search): measure `start` (stop if it fails) and
`end` (stop if it passes), then halve the interval until it is no wider than `step`.
Only stable levels within the threshold are reported (perf_analyzer's CSV rows).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from analyzer.load.base import LoadLevel
from analyzer.measurement import Measurement
from analyzer.profiler.level import LevelRun, stabilizing_latency_us
from analyzer.profiler.settings import MeasureSettings
from common.invariant import present

CONCURRENCY = "concurrency"
REQUEST_RATE = "request_rate"
INTERVALS = "intervals"  # --request-intervals: one run at the file's average rate

MeasureLevel = Callable[[LoadLevel], Awaitable[LevelRun]]


@dataclass(frozen=True, slots=True)
class SweepSpec:
    """The levels to measure: perf_analyzer's --concurrency-range / --request-rate-range
    (`start:end:step`) with --binary-search, or one --request-intervals run at `start`/s."""

    mode: str = CONCURRENCY
    start: float = 1
    end: float | None = None  # None: only `start`; 0: no end (until the latency threshold)
    step: float = 1
    binary_search: bool = False

    def __post_init__(self) -> None:
        if self.mode not in (CONCURRENCY, REQUEST_RATE, INTERVALS):
            raise ValueError(f"unknown sweep mode {self.mode!r}")
        if self.start <= 0:
            raise ValueError("the range start must be positive")
        if self.step <= 0:
            raise ValueError("the range step must be positive")
        if self.end is not None and self.end != 0 and self.end < self.start:
            raise ValueError(f"the range end {self.end:g} is below its start {self.start:g}")
        if self.mode == CONCURRENCY and not all(
            float(v).is_integer() for v in (self.start, self.step, self.end or 0)
        ):
            raise ValueError("concurrency range values must be whole numbers")
        if self.binary_search and not self.end:
            raise ValueError("--binary-search needs an explicit range end")

    @property
    def unbounded(self) -> bool:
        return self.end == 0

    def level(self, value: float) -> LoadLevel:
        if self.mode == CONCURRENCY:
            return LoadLevel(concurrency=int(value))
        return LoadLevel(request_rate=float(value))

    def midpoint(self, low: float, high: float) -> float:
        if self.mode == CONCURRENCY:
            return float((int(low) + int(high)) // 2)
        return (low + high) / 2


@dataclass(slots=True)
class SweepOutcome:
    """Every level measured (`runs`, in order) and what perf_analyzer would report."""

    runs: list[LevelRun] = field(default_factory=list)
    stop_reason: str = ""  # why a linear sweep ended early ("" when it ran to its end)

    @property
    def reported(self) -> list[Measurement]:
        return [run.measurement for run in self.runs if run.reported and run.measurement]


def _meets(run: LevelRun) -> bool:
    return run.reported and not run.failure


async def run_sweep(
    spec: SweepSpec, measure: MeasureLevel, settings: MeasureSettings
) -> SweepOutcome:
    """Measure the levels of `spec` with `measure`; a failed level (no successful request)
    ends the sweep like an unstable one."""
    outcome = SweepOutcome()

    def miss(run: LevelRun) -> str:
        return describe_miss(run, settings.latency_threshold_ms, settings.percentile)

    if spec.binary_search:
        await _binary(spec, measure, outcome, miss)
        return outcome
    value = spec.start
    end = spec.start if spec.end is None else spec.end
    while True:
        run = await measure(spec.level(value))
        outcome.runs.append(run)
        if not _meets(run):
            outcome.stop_reason = miss(run)
            return outcome
        value += spec.step
        if not spec.unbounded and value > end + 1e-9:
            return outcome


async def _binary(
    spec: SweepSpec,
    measure: MeasureLevel,
    outcome: SweepOutcome,
    miss: Callable[[LevelRun], str],
) -> None:
    low, high = spec.start, present(spec.end, "a binary search has an end")
    first = await measure(spec.level(low))
    outcome.runs.append(first)
    if not _meets(first):
        outcome.stop_reason = miss(first)
        return
    last = await measure(spec.level(high))
    outcome.runs.append(last)
    if _meets(last):
        return
    while high - low > spec.step:
        middle = spec.midpoint(low, high)
        if middle in (low, high):
            break
        run = await measure(spec.level(middle))
        outcome.runs.append(run)
        if _meets(run):
            low = middle
        else:
            high = middle


def describe_miss(run: LevelRun, threshold_ms: float = 0.0, percentile: int | None = None) -> str:
    """Why a level is not reported, in one sentence."""
    where = run.level.describe()
    if run.failure:
        return run.failure
    if not run.stable and run.within_threshold:
        return (
            f"could not obtain a stable measurement within {len(run.throughputs)} "
            f"measurement windows at {where}; try a longer --measurement-interval (or "
            "--measurement-request-count), a larger -s or more -r"
        )
    name = "average latency" if percentile is None else f"p{percentile} latency"
    value = max(run.latencies_us[-3:], default=0.0)
    if run.measurement is not None and run.stable:
        value = stabilizing_latency_us(run.measurement, percentile)
    return (
        f"{where}: the measured {name} ({value / 1000:.3f} ms) went over the latency "
        f"threshold of {threshold_ms:g} ms"
    )
