"""Measuring one level with a simulated driver: windows, stability, merge, warnings."""

from __future__ import annotations

import asyncio

import pytest

from analyzer.load.base import LoadLevel
from analyzer.profiler.level import LevelRun, Probe, profile_level
from analyzer.profiler.settings import COUNT_WINDOWS, MeasureSettings
from tests.support.fake_load import FakeClock, FakeDriver, FakeStats, LatencyModel


def constant(latency_us: float) -> LatencyModel:
    return lambda level, n: latency_us


def run_level(
    driver: FakeDriver,
    level: LoadLevel,
    settings: MeasureSettings,
    *,
    stats: bool = True,
    batch_size: int = 1,
) -> LevelRun:
    probe = Probe(stats=FakeStats(driver) if stats else None, clock=driver.clock)

    async def go() -> LevelRun:
        await driver.start(level)
        return await profile_level(driver, level, settings, probe, model="m", batch_size=batch_size)

    return asyncio.run(go())


FAST = MeasureSettings(measurement_interval_ms=1000)


def test_steady_load_is_stable_after_three_windows() -> None:
    driver = FakeDriver(FakeClock(), constant(1000.0), send_us=12, recv_us=7)
    run = run_level(driver, LoadLevel(concurrency=2), FAST)
    assert run.stable and run.within_threshold and run.reported and not run.failure
    m = run.measurement
    assert m is not None
    assert m.windows == 3 and len(run.throughputs) == 3
    assert m.window_seconds == pytest.approx(3.0)
    # two slots of 1 ms each: 2000 requests/s
    assert m.throughput == pytest.approx(2000, rel=0.01)
    assert m.request_throughput == pytest.approx(2000, rel=0.01)
    assert m.request_count == pytest.approx(6000, abs=2)
    assert m.latency_p50_us == m.latency_p99_us == m.latency_avg_us == 1000
    assert m.client_send_us == 12 and m.client_recv_us == 7
    assert m.concurrency == 2 and m.request_rate == 0 and m.model == "m"
    assert m.errors == {} and m.error_count == 0
    assert m.in_flight == 2


def test_server_breakdown_is_the_delta_over_the_merged_windows() -> None:
    driver = FakeDriver(FakeClock(), constant(1000.0))
    run = run_level(driver, LoadLevel(concurrency=1), FAST)
    m = run.measurement
    assert m is not None
    s = m.server
    assert s.available
    assert s.request_count == m.request_count
    assert s.execution_count == m.request_count
    assert s.queue_us == pytest.approx(100)
    assert s.compute_input_us == pytest.approx(20)
    assert s.compute_infer_us == pytest.approx(500)
    assert s.compute_output_us == pytest.approx(10)
    assert s.total_us == pytest.approx(660)
    assert s.overhead_us == pytest.approx(30)


def test_batch_size_multiplies_throughput_not_requests() -> None:
    driver = FakeDriver(FakeClock(), constant(2000.0), batch_size=4)
    run = run_level(driver, LoadLevel(concurrency=1), FAST, batch_size=4)
    m = run.measurement
    assert m is not None
    assert m.request_throughput == pytest.approx(500, rel=0.01)
    assert m.throughput == pytest.approx(2000, rel=0.01)
    assert m.batch_size == 4
    assert m.server.inference_count == 4 * m.server.request_count


def test_noisy_start_only_the_last_three_windows_are_merged() -> None:
    # collect n=1 opens the first window; windows 1..5 alternate 1 ms / 1.5 ms, then 2 ms
    def latency(level: LoadLevel, n: int) -> float:
        if n >= 7:
            return 2000.0
        return 1500.0 if n % 2 else 1000.0

    driver = FakeDriver(FakeClock(), latency)
    run = run_level(driver, LoadLevel(concurrency=1), FAST)
    assert run.stable
    m = run.measurement
    assert m is not None
    assert m.windows == 8
    assert m.latency_avg_us == pytest.approx(2000, rel=0.01)
    assert m.throughput == pytest.approx(500, rel=0.02)


def test_unstable_level_stops_after_max_trials_and_says_so() -> None:
    driver = FakeDriver(FakeClock(), lambda level, n: 1000.0 * (1 + (n % 3)))
    settings = MeasureSettings(measurement_interval_ms=500, max_trials=6)
    run = run_level(driver, LoadLevel(concurrency=1), settings)
    assert not run.stable and not run.reported
    assert run.measurement is not None and not run.measurement.stable
    assert len(run.throughputs) == 6
    assert run.failure == ""


def test_generous_stability_percentage_accepts_noise() -> None:
    driver = FakeDriver(FakeClock(), lambda level, n: 1000.0 * (1 + 0.2 * (n % 2)))
    run = run_level(
        driver,
        LoadLevel(concurrency=1),
        MeasureSettings(measurement_interval_ms=500, stability_percentage=50),
    )
    assert run.stable and len(run.throughputs) == 3


def test_percentile_drives_stability_and_is_reported() -> None:
    driver = FakeDriver(FakeClock(), constant(800.0))
    settings = MeasureSettings(measurement_interval_ms=500, percentile=75)
    run = run_level(driver, LoadLevel(concurrency=1), settings)
    m = run.measurement
    assert m is not None and run.stable
    assert m.extra_percentiles_us == {75: 800.0}
    assert m.percentile_us(75) == 800.0 and m.percentile_us(95) == 800.0


def test_count_windows_hold_enough_requests_and_last_at_least_a_second() -> None:
    driver = FakeDriver(FakeClock(), constant(10_000.0))  # 100 requests/s
    settings = MeasureSettings(measurement_mode=COUNT_WINDOWS, measurement_request_count=150)
    run = run_level(driver, LoadLevel(concurrency=1), settings)
    m = run.measurement
    assert m is not None and run.stable
    assert m.request_count >= 3 * 150
    assert m.window_seconds >= 3 * 1.5 - 0.01
    driver = FakeDriver(FakeClock(), constant(1000.0))  # 1000/s: the one-second floor rules
    settings = MeasureSettings(measurement_mode=COUNT_WINDOWS, measurement_request_count=10)
    m = run_level(driver, LoadLevel(concurrency=1), settings).measurement
    assert m is not None and m.window_seconds == pytest.approx(3.0)


def test_failed_requests_are_counted_per_message_not_measured() -> None:
    driver = FakeDriver(FakeClock(), constant(1000.0), fail_every=10, error="queue full")
    run = run_level(driver, LoadLevel(concurrency=1), FAST)
    m = run.measurement
    assert m is not None
    assert m.error_count > 0 and m.errors == {"queue full": m.error_count}
    assert m.request_count == pytest.approx(9 * m.error_count, abs=9)
    assert m.throughput == pytest.approx(900, rel=0.01)
    assert sum(run.errors.values()) >= m.error_count


def test_a_level_where_everything_fails_is_a_failure_with_the_servers_message() -> None:
    driver = FakeDriver(FakeClock(), constant(1000.0), fail_every=1, error="bad input")
    run = run_level(driver, LoadLevel(concurrency=1), FAST)
    assert run.measurement is None and not run.stable and not run.reported
    assert "no request completed successfully" in run.failure
    assert "bad input" in run.failure


def test_warmup_requests_complete_before_the_first_window() -> None:
    driver = FakeDriver(FakeClock(), constant(1000.0))
    settings = MeasureSettings(measurement_interval_ms=1000, warmup_request_count=200)
    run = run_level(driver, LoadLevel(concurrency=1), settings)
    m = run.measurement
    assert m is not None
    assert driver.completed >= 200 + m.request_count
    assert run.first_window_start_ns - 1_000_000_000 >= 200 * 1_000_000 - 1


def test_latency_threshold_stops_and_marks_the_level() -> None:
    driver = FakeDriver(FakeClock(), lambda level, n: 5000.0 * (1 + (n % 2)))  # unstable
    settings = MeasureSettings(measurement_interval_ms=500, latency_threshold_ms=4)
    run = run_level(driver, LoadLevel(concurrency=1), settings)
    assert len(run.throughputs) == 3  # stopped as soon as three windows exist
    assert not run.within_threshold and not run.reported
    driver = FakeDriver(FakeClock(), constant(5000.0))  # stable but over
    run = run_level(driver, LoadLevel(concurrency=1), settings)
    assert run.stable and not run.within_threshold and not run.reported


def test_request_rate_level_and_falling_behind_warning() -> None:
    driver = FakeDriver(FakeClock(), constant(2000.0))
    run = run_level(driver, LoadLevel(request_rate=250), FAST)
    m = run.measurement
    assert m is not None and run.stable
    assert m.concurrency == 0 and m.request_rate == 250
    assert m.request_throughput == pytest.approx(250, rel=0.01)
    assert m.warnings == ()

    class Lagging(FakeDriver):
        @property
        def in_flight(self) -> int:  # grows every window: the client is behind
            return self.collects * 100

    driver = Lagging(FakeClock(), constant(2000.0))
    run = run_level(driver, LoadLevel(request_rate=250), FAST)
    assert run.measurement is not None
    assert any("could not keep up" in w for w in run.measurement.warnings)


def test_no_statistics_leaves_the_server_breakdown_unavailable() -> None:
    driver = FakeDriver(FakeClock(), constant(1000.0))
    run = run_level(driver, LoadLevel(concurrency=1), FAST, stats=False)
    assert run.measurement is not None and not run.measurement.server.available


def test_relaxed_latency_stability_for_async_mode() -> None:
    def latency(level: LoadLevel, n: int) -> float:
        return 1000.0 * (1 + 0.5 * (n % 2))  # latency moves; completions stay 1 per ms

    class SteadyRate(FakeDriver):
        def _gap_ns(self, latency_ns: float) -> float:
            return 1e6

    settings = MeasureSettings(measurement_interval_ms=500, max_trials=5)
    run = run_level(SteadyRate(FakeClock(), latency), LoadLevel(concurrency=1), settings)
    assert not run.stable
    relaxed = MeasureSettings(
        measurement_interval_ms=500, max_trials=5, relax_latency_stability=True
    )
    run = run_level(SteadyRate(FakeClock(), latency), LoadLevel(concurrency=1), relaxed)
    assert run.stable and run.measurement is not None
    assert any("not stabilizing" in w for w in run.measurement.warnings)


def test_records_are_kept_only_when_asked() -> None:
    driver = FakeDriver(FakeClock(), constant(1000.0))
    assert run_level(driver, LoadLevel(concurrency=1), FAST).windows == []
    driver = FakeDriver(FakeClock(), constant(1000.0))
    kept = MeasureSettings(measurement_interval_ms=1000, keep_records=True)
    run = run_level(driver, LoadLevel(concurrency=1), kept)
    assert len(run.windows) == 3
    for earlier, later in zip(run.windows, run.windows[1:], strict=False):
        assert earlier.end_ns == later.start_ns
    for window in run.windows:
        assert all(window.start_ns < r.end_ns <= window.end_ns for r in window.ok)
