"""The two-fidelity load search (`search_staged`) against made-up load curves: which levels
it measures with short windows, which with full ones, and what it reports."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from analyzer.load.base import LoadLevel
from analyzer.measurement import Measurement
from analyzer.profiler.level import LevelRun
from analyzer.profiler.search import FULL, SCOUT, SearchResult, StepReport, search_max_load
from analyzer.profiler.staged_search import StagedLimits, search_staged
from analyzer.profiler.sweep import MeasureLevel

LIMIT_US = 10_000.0


def run_at(level: LoadLevel, throughput: float, p95_us: float, stable: bool = True) -> LevelRun:
    m = Measurement(
        model="m",
        concurrency=level.concurrency,
        request_rate=0.0,
        batch_size=1,
        throughput=throughput,
        request_throughput=throughput,
        request_count=100,
        error_count=0,
        errors={},
        latency_avg_us=p95_us,
        latency_p50_us=p95_us,
        latency_p90_us=p95_us,
        latency_p95_us=p95_us,
        latency_p99_us=p95_us,
        stable=stable,
    )
    return LevelRun(level, m, stable, True)


@dataclass
class Curve:
    """Throughput grows `per_level` a concurrent request up to `capacity`; latency is the
    queueing of Little's law. `scout_over` / `full_over`: levels one fidelity sees over the
    limit (a noisy short window, a busy machine); `scout_gain`: levels the short windows
    see this much faster."""

    per_level: float = 1000.0
    capacity: float = 4000.0
    scout_over: dict[int, int] = field(default_factory=dict)  # level -> times seen over
    full_over: set[int] = field(default_factory=set)
    scout_gain: dict[int, float] = field(default_factory=dict)
    measured: list[tuple[str, int]] = field(default_factory=list)

    def throughput(self, c: int) -> float:
        return min(c * self.per_level, self.capacity)

    def latency_us(self, c: int) -> float:
        return 1e6 * c / self.throughput(c)

    def measure(self, fidelity: str) -> MeasureLevel:
        async def at(level: LoadLevel) -> LevelRun:
            c = level.concurrency
            self.measured.append((fidelity, c))
            throughput, latency = self.throughput(c), self.latency_us(c)
            if fidelity == SCOUT:
                throughput *= self.scout_gain.get(c, 1.0)
                if self.scout_over.get(c, 0) > 0:
                    self.scout_over[c] -= 1
                    latency = 2 * LIMIT_US
            elif c in self.full_over:
                latency = 2 * LIMIT_US
            return run_at(level, throughput, latency)

        return at

    def levels(self, fidelity: str) -> list[int]:
        return [c for f, c in self.measured if f == fidelity]


def staged(curve: Curve, report: StepReport | None = None, **limits: int) -> SearchResult:
    settings = StagedLimits(latency_limit_us=LIMIT_US, percentile=95, **limits)  # type: ignore[arg-type]
    return asyncio.run(search_staged(curve.measure(SCOUT), curve.measure(FULL), settings, report))


def test_full_windows_measure_only_the_operating_point() -> None:
    # 1000/s per concurrent request up to 4000/s: saturated from 4; 10 ms is crossed past 40.
    curve = Curve()
    result = staged(curve)
    assert curve.levels(SCOUT) == [1, 2, 4, 8, 16, 32]  # saturated over 4, 8, 16, 32
    assert curve.levels(FULL) == [4]
    assert result.best is not None and result.best.concurrency == 4
    assert result.best.throughput == 4000.0
    assert [m.concurrency for m in result.measurements] == [4]
    assert [m.concurrency for m in result.scouted] == [1, 2, 4, 8, 16, 32]
    assert [(s.level, s.fidelity) for s in result.steps][-1] == (4, FULL)


def test_no_binary_steps_where_throughput_had_stopped_growing() -> None:
    # 4 ms a request, saturated from 4 (1000/s); the limit (10 ms) is crossed between 8 (8 ms)
    # and 16 (16 ms), where more load can only queue.
    curve = Curve(per_level=250.0, capacity=1000.0)
    result = staged(curve, max_binary_steps=2)
    assert curve.levels(SCOUT) == [1, 2, 4, 8, 16, 16]
    assert result.best is not None and result.best.concurrency == 4
    # The single-fidelity search bisects there (12, then 10).
    old = Curve(per_level=250.0, capacity=1000.0)
    asyncio.run(search_max_load(old.measure(FULL), latency_limit_us=LIMIT_US, max_binary_steps=2))
    assert old.levels(FULL) == [1, 2, 4, 8, 16, 12, 10]


def test_binary_steps_where_throughput_still_grew_at_the_crossing() -> None:
    # 8 ms a request until 2000/s at 16; the limit is crossed between 16 and 32.
    curve = Curve(per_level=125.0, capacity=2000.0)
    result = staged(curve, max_binary_steps=2)
    # The crossing is scouted twice, a binary step once; 20 (10 ms) is within the limit.
    assert curve.levels(SCOUT) == [1, 2, 4, 8, 16, 32, 32, 24, 20]
    assert curve.levels(FULL) == [16]
    assert result.best is not None and result.best.throughput == 2000.0


def test_the_search_starts_where_it_is_told_and_goes_down_for_the_operating_point() -> None:
    curve = Curve()
    result = staged(curve, start=8)
    scouted = curve.levels(SCOUT)
    assert scouted[0] == 8 and 1 not in scouted
    assert 4 in scouted and 2 in scouted  # 4 still reaches 95%, 2 does not
    assert curve.levels(FULL) == [4]
    assert result.best is not None and result.best.concurrency == 4


def test_a_start_over_the_limit_is_halved_until_a_level_passes() -> None:
    curve = Curve()
    result = staged(curve, start=128)  # 128: 32 ms, 64: 16 ms, 32: 8 ms
    assert curve.levels(SCOUT)[:5] == [128, 128, 64, 64, 32]  # each over the limit twice
    assert result.best is not None and result.best.concurrency == 4


def test_a_short_window_over_the_limit_is_scouted_again() -> None:
    curve = Curve(scout_over={2: 1})  # one hiccup at 2
    result = staged(curve)
    assert curve.levels(SCOUT)[:3] == [1, 2, 2]
    assert result.best is not None and result.best.concurrency == 4


def test_the_operating_point_over_the_limit_with_full_windows_steps_down() -> None:
    curve = Curve(full_over={4})
    result = staged(curve)
    assert curve.levels(FULL) == [4, 2]
    assert result.best is not None and result.best.concurrency == 2
    assert result.best.latency_p95_us <= LIMIT_US


def test_a_first_pass_that_promised_too_much_confirms_the_next_level_too() -> None:
    # The short windows saw 4 at 4,400/s (noise), the ceiling: confirmed at 4,000/s, 4 is under
    # 95% of it, and 8 gives 4,400/s.
    curve = Curve(capacity=4400.0, scout_gain={4: 1.1})
    result = staged(curve)
    assert curve.levels(FULL) == [4, 8]
    assert result.best is not None and result.best.concurrency == 8


def test_when_the_level_above_is_over_the_limit_with_full_windows_the_middle_is_tried() -> None:
    curve = Curve(capacity=4400.0, scout_gain={4: 1.1}, full_over={8})
    result = staged(curve)
    assert curve.levels(FULL) == [4, 8, 6]
    assert result.best is not None and result.best.concurrency == 6


def test_nothing_within_the_limit_in_the_first_pass_is_judged_with_full_windows() -> None:
    curve = Curve(scout_over={1: 2})  # the short windows see level 1 over, twice
    result = staged(curve)
    assert curve.levels(FULL) == [1]
    assert result.best is not None and result.best.concurrency == 1


def test_over_the_limit_even_at_one_is_not_found() -> None:
    curve = Curve(per_level=50.0, capacity=100.0)  # 20 ms a request
    result = staged(curve)
    assert curve.levels(SCOUT) == [1, 1] and curve.levels(FULL) == [1]
    assert result.best is None and "even the lowest level does not pass" in result.reason
    assert [m.concurrency for m in result.measurements] == [1]


def test_the_ceiling_is_reported_per_step_and_once_more_when_the_first_pass_is_done() -> None:
    reports: list[tuple[int, float]] = []

    def report(step: int, ceiling: float) -> bool:
        reports.append((step, ceiling))
        return False

    staged(Curve(), report)
    assert reports == [
        (0, 1000.0),
        (1, 2000.0),
        (2, 4000.0),
        (3, 4000.0),
        (4, 4000.0),
        (5, 4000.0),
        (6, 4000.0),  # the first pass is done
    ]


def test_a_report_answering_stop_ends_the_search_before_any_full_window() -> None:
    curve = Curve()

    def stop_once_flat(step: int, ceiling: float) -> bool:
        return ceiling >= 4000.0 and step >= 3

    result = staged(curve, stop_once_flat)
    assert result.stopped_early and result.best is None
    assert curve.levels(FULL) == []
    assert curve.levels(SCOUT) == [1, 2, 4, 8]
    assert "4000.0 infer/s" in result.reason


def test_limits_are_checked() -> None:
    with pytest.raises(ValueError, match="start <= max_level"):
        StagedLimits(latency_limit_us=LIMIT_US, start=64, max_level=32)
