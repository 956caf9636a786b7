"""Sweeps (linear, unbounded, binary) and the max-load search with a simulated driver."""

from __future__ import annotations

import asyncio

import pytest

from analyzer.load.base import LoadLevel
from analyzer.profiler.level import LevelRun, Probe
from analyzer.profiler.search import SearchResult, search_max_load
from analyzer.profiler.session import LevelProfiler
from analyzer.profiler.settings import MeasureSettings
from analyzer.profiler.sweep import REQUEST_RATE, SweepOutcome, SweepSpec, run_sweep
from tests.support.fake_load import FakeClock, FakeDriver, FakeStats, LatencyModel


def profiler_for(latency: LatencyModel, settings: MeasureSettings) -> LevelProfiler:
    driver = FakeDriver(FakeClock(), latency)
    probe = Probe(stats=FakeStats(driver), clock=driver.clock)
    return LevelProfiler(driver, settings, probe, model="m", batch_size=1)


def sweep(latency: LatencyModel, spec: SweepSpec, settings: MeasureSettings) -> SweepOutcome:
    profiler = profiler_for(latency, settings)

    async def go() -> SweepOutcome:
        try:
            return await run_sweep(spec, profiler.measure, settings)
        finally:
            await profiler.close()

    return asyncio.run(go())


def levels(runs: list[LevelRun]) -> list[float]:
    return [run.level.concurrency or run.level.request_rate for run in runs]


def grows_with_concurrency(level: LoadLevel, n: int) -> float:
    return 1000.0 * max(1, level.concurrency)  # 1 ms per concurrent request


SETTINGS = MeasureSettings(measurement_interval_ms=500)


def test_single_level_when_no_end() -> None:
    outcome = sweep(grows_with_concurrency, SweepSpec(start=3), SETTINGS)
    assert levels(outcome.runs) == [3]
    assert [m.concurrency for m in outcome.reported] == [3]


def test_linear_sweep_covers_start_to_end_by_step() -> None:
    outcome = sweep(grows_with_concurrency, SweepSpec(start=1, end=7, step=2), SETTINGS)
    assert levels(outcome.runs) == [1, 3, 5, 7]
    assert len(outcome.reported) == 4 and outcome.stop_reason == ""


def test_latency_threshold_stops_the_sweep_and_drops_the_level_over_it() -> None:
    settings = MeasureSettings(measurement_interval_ms=500, latency_threshold_ms=3.5)
    outcome = sweep(grows_with_concurrency, SweepSpec(start=1, end=10), settings)
    assert levels(outcome.runs) == [1, 2, 3, 4]
    assert [m.concurrency for m in outcome.reported] == [1, 2, 3]
    assert "latency threshold of 3.5 ms" in outcome.stop_reason
    assert "4.000 ms" in outcome.stop_reason


def test_end_zero_runs_until_the_threshold() -> None:
    settings = MeasureSettings(measurement_interval_ms=500, latency_threshold_ms=5.5)
    outcome = sweep(grows_with_concurrency, SweepSpec(start=2, end=0, step=2), settings)
    assert levels(outcome.runs) == [2, 4, 6]
    assert [m.concurrency for m in outcome.reported] == [2, 4]


def test_unstable_level_ends_the_sweep() -> None:
    def unstable_from_3(level: LoadLevel, n: int) -> float:
        if level.concurrency >= 3:
            return 1000.0 * (1 + n % 2)
        return 1000.0

    settings = MeasureSettings(measurement_interval_ms=500, max_trials=5)
    outcome = sweep(unstable_from_3, SweepSpec(start=1, end=5), settings)
    assert levels(outcome.runs) == [1, 2, 3]
    assert len(outcome.reported) == 2
    assert "could not obtain a stable measurement within 5" in outcome.stop_reason


def test_binary_search_finds_the_highest_level_within_the_threshold() -> None:
    settings = MeasureSettings(measurement_interval_ms=500, latency_threshold_ms=5.5)
    outcome = sweep(
        grows_with_concurrency, SweepSpec(start=1, end=16, step=1, binary_search=True), settings
    )
    assert levels(outcome.runs) == [1, 16, 8, 4, 6, 5]
    assert max(m.concurrency for m in outcome.reported) == 5


def test_binary_search_stops_early_when_the_end_passes_or_the_start_fails() -> None:
    settings = MeasureSettings(measurement_interval_ms=500, latency_threshold_ms=100)
    spec = SweepSpec(start=1, end=16, binary_search=True)
    assert levels(sweep(grows_with_concurrency, spec, settings).runs) == [1, 16]
    settings = MeasureSettings(measurement_interval_ms=500, latency_threshold_ms=0.5)
    outcome = sweep(grows_with_concurrency, spec, settings)
    assert levels(outcome.runs) == [1] and outcome.reported == []


def test_request_rate_sweep_uses_fractional_rates() -> None:
    spec = SweepSpec(mode=REQUEST_RATE, start=50, end=150, step=50)
    outcome = sweep(lambda level, n: 1000.0, spec, SETTINGS)
    assert levels(outcome.runs) == [50, 100, 150]
    assert [m.request_rate for m in outcome.reported] == [50, 100, 150]
    for m in outcome.reported:
        assert m.request_throughput == pytest.approx(m.request_rate, rel=0.02)


def test_driver_is_started_once_then_changed_and_stopped() -> None:
    profiler = profiler_for(grows_with_concurrency, SETTINGS)
    driver = profiler.driver
    assert isinstance(driver, FakeDriver)

    async def go() -> None:
        await run_sweep(SweepSpec(start=1, end=3), profiler.measure, SETTINGS)
        await profiler.close()

    asyncio.run(go())
    assert driver.started and driver.stopped
    assert [lv.concurrency for lv in driver.levels] == [1, 2, 3]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"start": 0}, "start must be positive"),
        ({"start": 1, "step": 0}, "step must be positive"),
        ({"start": 5, "end": 2}, "below its start"),
        ({"start": 1.5}, "whole numbers"),
        ({"start": 1, "binary_search": True}, "explicit range end"),
        ({"mode": "bogus"}, "unknown sweep mode"),
    ],
)
def test_bad_sweep_specs(spec: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SweepSpec(**spec)  # type: ignore[arg-type]


def search(latency: LatencyModel, **kwargs: object) -> tuple[SearchResult, FakeDriver]:
    profiler = profiler_for(latency, SETTINGS)

    async def go() -> SearchResult:
        try:
            return await search_max_load(profiler.measure, **kwargs)  # type: ignore[arg-type]
        finally:
            await profiler.close()

    result = asyncio.run(go())
    assert isinstance(profiler.driver, FakeDriver)
    return result, profiler.driver


def queueing(level: LoadLevel, n: int) -> float:
    return 1000.0 + 100.0 * level.concurrency  # 1 ms + 0.1 ms per concurrent request


def test_find_max_load_doubles_then_bisects_the_boundary() -> None:
    result, driver = search(queueing, latency_limit_us=2000, percentile=95)
    assert [lv.concurrency for lv in driver.levels] == [1, 2, 4, 8, 16, 12, 10, 11]
    assert result.found and result.max_level == 10
    assert result.best is not None and result.best.concurrency == 10
    assert result.best.latency_p95_us <= 2000
    assert len(result.measurements) == 8
    assert "between 10 and 11" in result.reason


def test_find_max_load_stops_doubling_when_throughput_saturates() -> None:
    def saturated(level: LoadLevel, n: int) -> float:
        return 1000.0 * level.concurrency  # 1000 requests/s whatever the concurrency

    result, driver = search(saturated, latency_limit_us=100_000, percentile=99)
    assert [lv.concurrency for lv in driver.levels] == [1, 2, 4, 8]
    assert result.reason == "throughput stopped growing"
    assert result.best is not None and result.best.concurrency == 1  # same throughput, lowest
    assert result.max_level == 8


def test_find_max_load_respects_max_level() -> None:
    result, driver = search(queueing, latency_limit_us=1e9, max_level=6)
    assert [lv.concurrency for lv in driver.levels] == [1, 2, 4, 6]
    assert result.max_level == 6 and "highest level" in result.reason


def test_find_max_load_says_when_even_the_start_is_over_the_limit() -> None:
    result, driver = search(queueing, latency_limit_us=500)
    assert not result.found and result.best is None and result.max_level is None
    assert [lv.concurrency for lv in driver.levels] == [1]
    assert "even the lowest level does not pass" in result.reason
    assert "p95 latency 1.100 ms is over the limit of 0.500 ms" in result.reason
    assert len(result.measurements) == 1


def test_find_max_load_in_request_rate_mode() -> None:
    def rate_latency(level: LoadLevel, n: int) -> float:
        return 1000.0 + 10.0 * level.request_rate

    result, _ = search(
        rate_latency, latency_limit_us=2000, mode=REQUEST_RATE, start=8, max_level=512
    )
    assert result.max_level == 100
    assert result.best is not None and result.best.request_rate == 100


def test_a_level_stopped_by_the_threshold_before_stabilizing_says_so() -> None:
    def noisy_and_slow(level: LoadLevel, n: int) -> float:
        return 5000.0 * (1 + n % 2)

    settings = MeasureSettings(measurement_interval_ms=500, latency_threshold_ms=4)
    outcome = sweep(noisy_and_slow, SweepSpec(start=1, end=4), settings)
    assert levels(outcome.runs) == [1] and outcome.reported == []
    assert "went over the latency threshold of 4 ms" in outcome.stop_reason
    assert "10.000 ms" in outcome.stop_reason


def test_public_api_is_importable_from_the_package() -> None:
    import analyzer

    assert analyzer.MeasureSettings is MeasureSettings
    assert callable(analyzer.find_max_load) and callable(analyzer.measure)
    with pytest.raises(AttributeError):
        _ = analyzer.nothing_like_this
