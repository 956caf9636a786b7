"""Telling a request-rate level whose schedule was not kept (the detection logic alone)."""

from __future__ import annotations

import asyncio

import pytest

from analyzer.load.base import DELAY_TOLERANCE_NS, LoadLevel, RequestRecord, ScheduleProgress
from analyzer.profiler.level import LevelRun, Probe, profile_level
from analyzer.profiler.schedule_check import RateKeeping, rate_keeping, schedule_warnings
from analyzer.profiler.settings import MeasureSettings
from analyzer.profiler.window import Window
from tests.support.fake_load import FakeClock, FakeDriver

LEVEL = LoadLevel(request_rate=1000)
OK = RequestRecord(start_ns=0, end_ns=1, send_ns=0, recv_ns=0, ok=True)


def keeping(
    *,
    sent: int = 1000,
    delayed: int = 0,
    cap_waits: int = 0,
    behind_ns: int = 0,
    in_flight: tuple[int, int] = (4, 4),
    completed: int = 1000,
    counted: bool = True,
) -> RateKeeping:
    """One second at 1000/s asked; `counted=False` is a driver that does not count sends."""
    schedule = ScheduleProgress(
        sent=sent if counted else 0,
        delayed=delayed,
        cap_waits=cap_waits,
        behind_ns=behind_ns,
        max_connections=8,
    )
    return RateKeeping(
        asked_rate=1000,
        duration_s=1.0,
        sent=sent,
        completed=completed,
        in_flight_start=in_flight[0],
        in_flight_end=in_flight[1],
        schedule=schedule,
    )


def test_a_kept_schedule_gives_no_warning() -> None:
    assert schedule_warnings(LEVEL, keeping(delayed=10)) == []  # 1.0%: at the limit, not over


def test_over_one_percent_of_late_sends_is_the_client_behind() -> None:
    k = keeping(delayed=11)
    assert k.delayed_pct == 1.1 and k.client_behind and not k.server_behind
    (warning,) = schedule_warnings(LEVEL, k)
    assert warning.startswith(
        "request rate 1000/s: the client could not keep up with the desired request rate"
    )
    assert "1.1% of them more than 1 ms late" in warning
    assert "sent 1000.0 requests/s" in warning


def test_stuck_at_the_connection_cap_is_behind_even_without_late_sends() -> None:
    # Every connection busy, nothing sent for a while: the next send is overdue.
    k = keeping(sent=8, cap_waits=1, behind_ns=DELAY_TOLERANCE_NS * 250, completed=0)
    assert k.client_behind
    (warning,) = schedule_warnings(LEVEL, k)
    assert "all 8 connections busy once" in warning
    assert "250 ms behind the schedule at the end" in warning


def test_a_moment_behind_within_the_tolerance_is_not() -> None:
    assert not keeping(behind_ns=DELAY_TOLERANCE_NS).client_behind


def test_a_driver_without_counts_falls_back_on_the_send_rate() -> None:
    assert not keeping(sent=950, counted=False).client_behind
    assert keeping(sent=850, counted=False).client_behind


def test_requests_piling_up_is_the_server_behind() -> None:
    k = keeping(in_flight=(4, 300), completed=700)
    assert k.server_behind and not k.client_behind
    (warning,) = schedule_warnings(LEVEL, k)
    assert "the server could not keep up with the request rate" in warning
    assert "grew from 4 to 300" in warning
    assert not keeping(in_flight=(4, 6), completed=10).server_behind  # a couple is noise


def test_both_can_be_behind() -> None:
    k = keeping(delayed=500, in_flight=(0, 400), completed=600)
    assert len(schedule_warnings(LEVEL, k)) == 2


def _window(start_s: int, schedule: ScheduleProgress, in_flight: tuple[int, int]) -> Window:
    window = Window(start_ns=start_s * 10**9, end_ns=(start_s + 1) * 10**9)
    window.ok = [OK] * 900
    window.in_flight_start, window.in_flight_end = in_flight
    window.sent = 900 + in_flight[1] - in_flight[0]
    window.schedule = schedule
    return window


def test_rate_keeping_adds_the_windows_up() -> None:
    windows = [
        _window(0, ScheduleProgress(1000, 5, 0, 0, 8), (0, 10)),
        _window(1, ScheduleProgress(1000, 30, 2, 0, 8), (10, 20)),
        _window(2, ScheduleProgress(1000, 10, 1, 5 * DELAY_TOLERANCE_NS, 8), (20, 30)),
    ]
    k = rate_keeping(LEVEL, windows)
    assert k.duration_s == 3.0 and k.completed == 2700 and k.sent == 2730
    assert (k.in_flight_start, k.in_flight_end) == (0, 30)
    assert k.schedule == ScheduleProgress(3000, 45, 3, 5 * DELAY_TOLERANCE_NS, 8)
    assert k.delayed_pct == 1.5 and k.client_behind


def test_progress_since_an_earlier_reading() -> None:
    earlier = ScheduleProgress(100, 3, 1, 7, 8)
    later = ScheduleProgress(250, 5, 4, 0, 8)
    assert later.since(earlier) == ScheduleProgress(150, 2, 3, 0, 8)


class LateDriver(FakeDriver):
    """Completes 250 requests/s on time, but reports `late_share` of its sends as delayed."""

    def __init__(self, late_share: float) -> None:
        super().__init__(FakeClock(), lambda level, n: 2000.0)
        self.late_share = late_share

    @property
    def schedule_progress(self) -> ScheduleProgress:
        sent = self.completed
        return ScheduleProgress(sent, int(sent * self.late_share), 0, 0, 4096)


def _measure(driver: FakeDriver) -> LevelRun:
    level = LoadLevel(request_rate=250)
    probe = Probe(stats=None, clock=driver.clock)

    async def go() -> LevelRun:
        await driver.start(level)
        settings = MeasureSettings(measurement_interval_ms=1000)
        return await profile_level(driver, level, settings, probe, model="m", batch_size=1)

    return asyncio.run(go())


def test_the_measurement_carries_the_late_share_and_the_warning() -> None:
    m = _measure(LateDriver(0.2)).measurement
    assert m is not None
    assert m.delayed_pct == pytest.approx(20.0, abs=0.5)
    assert any("could not keep up with the desired request rate" in w for w in m.warnings)
    assert m.to_json()["delayed_pct"] == m.delayed_pct

    m = _measure(LateDriver(0.0)).measurement
    assert m is not None and m.delayed_pct == 0.0 and m.warnings == ()
