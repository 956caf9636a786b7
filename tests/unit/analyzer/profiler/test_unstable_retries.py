"""A level that does not settle is measured again with longer windows (find_max_load's
`unstable_retries`)."""

from __future__ import annotations

import asyncio

from analyzer.api import PerfSession
from analyzer.load.base import LoadLevel
from analyzer.profiler.level import LevelRun
from analyzer.profiler.settings import MeasureSettings


class SettlesWithLongWindows:
    """A level profiler whose measurements settle only with windows of `settles_at_ms`."""

    def __init__(self, settles_at_ms: int) -> None:
        self.settings = MeasureSettings(measurement_interval_ms=300, measurement_request_count=50)
        self.settles_at_ms = settles_at_ms
        self.intervals: list[int] = []

    async def measure(self, level: LoadLevel, settings: MeasureSettings | None = None) -> LevelRun:
        used = settings or self.settings
        self.intervals.append(used.measurement_interval_ms)
        stable = used.measurement_interval_ms >= self.settles_at_ms
        return LevelRun(level, None, stable, True)


def session_over(profiler: SettlesWithLongWindows) -> PerfSession:
    return PerfSession(model=None, profiler=profiler, statistics=None, epoch_offset_ns=0)  # type: ignore[arg-type]


def test_an_unsettled_level_is_measured_again_with_windows_twice_as_long() -> None:
    profiler = SettlesWithLongWindows(settles_at_ms=600)
    session = session_over(profiler)
    run = asyncio.run(session.measure_settling(LoadLevel(concurrency=1), retries=2))
    assert run.stable
    assert profiler.intervals == [300, 600]
    assert len(session.runs) == 2


def test_retries_are_bounded() -> None:
    profiler = SettlesWithLongWindows(settles_at_ms=10_000)
    session = session_over(profiler)
    run = asyncio.run(session.measure_settling(LoadLevel(concurrency=1), retries=2))
    assert not run.stable
    assert profiler.intervals == [300, 600, 1200]


def test_without_retries_an_unsettled_level_is_measured_once() -> None:
    profiler = SettlesWithLongWindows(settles_at_ms=600)
    session = session_over(profiler)
    run = asyncio.run(session.measure_settling(LoadLevel(concurrency=1), retries=0))
    assert not run.stable
    assert profiler.intervals == [300]


def test_longer_windows_double_time_and_count() -> None:
    longer = MeasureSettings(measurement_interval_ms=500, measurement_request_count=40)
    longer = longer.with_longer_windows()
    assert (longer.measurement_interval_ms, longer.measurement_request_count) == (1000, 80)
