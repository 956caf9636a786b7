"""Telling a request-rate level whose schedule was not kept.

perf_analyzer counts a request as delayed when it left more than 1 ms after its scheduled time
and warns when over 1% of a measurement's requests were ("not able to keep up with the desired
request rate"): the latencies then start at the late sends and understate what a client on
that schedule would wait. Here the driver counts its sends and the delayed ones. The client is
also behind when, at the end of the measurement, the next send is already overdue because
every connection is busy (the cap). Separately, the server is behind when the requests in
flight keep growing although they leave on time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from analyzer.load.base import DELAY_TOLERANCE_NS, LoadLevel, ScheduleProgress
from analyzer.profiler.window import Window

DELAYED_PCT_LIMIT = 1.0  # perf_analyzer's threshold, percent of the requests
# Without the driver's own counts: sent under 90% of the asked rate is behind.
SENT_SHARE_LIMIT = 0.9
# The server is behind when the requests in flight grew by more than this share of the
# completed ones (and by more than a couple, for short windows).
PILING_UP_SHARE = 0.1
PILING_UP_MIN = 2


@dataclass(frozen=True, slots=True)
class RateKeeping:
    """What the merged windows of a request-rate level say about keeping its schedule."""

    asked_rate: float  # requests/s
    duration_s: float
    sent: int  # requests sent in the windows (completed, plus the growth of those in flight)
    completed: int  # requests that ended in the windows (successful or not)
    in_flight_start: int
    in_flight_end: int
    schedule: ScheduleProgress  # the driver's counts over the windows (zeros: not counted)

    @property
    def send_rate(self) -> float:
        return self.sent / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def delayed_pct(self) -> float:
        """Share of the scheduled sends that left more than 1 ms late, percent."""
        if self.schedule.sent <= 0:
            return 0.0
        return 100.0 * self.schedule.delayed / self.schedule.sent

    @property
    def client_behind(self) -> bool:
        if self.schedule.behind_ns > DELAY_TOLERANCE_NS:
            return True  # stuck: the next send is overdue and no connection is free
        if self.schedule.sent > 0:
            return self.delayed_pct > DELAYED_PCT_LIMIT
        if self.schedule.cap_waits > 0:
            return True
        return self.send_rate < SENT_SHARE_LIMIT * self.asked_rate  # a driver without counts

    @property
    def server_behind(self) -> bool:
        growth = self.in_flight_end - self.in_flight_start
        return growth > max(PILING_UP_MIN, PILING_UP_SHARE * self.completed)


def rate_keeping(level: LoadLevel, windows: Sequence[Window]) -> RateKeeping:
    """The schedule's keeping over consecutive `windows` of a request-rate level."""
    schedule = ScheduleProgress()
    for window in windows:
        schedule = ScheduleProgress(
            sent=schedule.sent + window.schedule.sent,
            delayed=schedule.delayed + window.schedule.delayed,
            cap_waits=schedule.cap_waits + window.schedule.cap_waits,
            behind_ns=window.schedule.behind_ns,  # the last window's: the end of the windows
            max_connections=window.schedule.max_connections,
        )
    return RateKeeping(
        asked_rate=level.request_rate,
        duration_s=sum(window.duration_s for window in windows),
        sent=sum(window.sent for window in windows),
        completed=sum(len(window.ok) + len(window.failed) for window in windows),
        in_flight_start=windows[0].in_flight_start if windows else 0,
        in_flight_end=windows[-1].in_flight_end if windows else 0,
        schedule=schedule,
    )


def schedule_warnings(level: LoadLevel, keeping: RateKeeping) -> list[str]:
    """perf_analyzer-style warnings for a request-rate level; none when the schedule held."""
    warnings = []
    if keeping.client_behind:
        warnings.append(_client_behind(level, keeping))
    if keeping.server_behind:
        rate = keeping.completed / keeping.duration_s if keeping.duration_s > 0 else 0.0
        warnings.append(
            f"{level.describe()}: the server could not keep up with the request rate: the "
            f"requests in flight grew from {keeping.in_flight_start} to "
            f"{keeping.in_flight_end} while it answered {rate:.1f} requests/s"
        )
    return warnings


def _client_behind(level: LoadLevel, keeping: RateKeeping) -> str:
    schedule = keeping.schedule
    facts = [f"it sent {keeping.send_rate:.1f} requests/s"]
    if schedule.sent > 0:
        facts.append(f"{keeping.delayed_pct:.1f}% of them more than 1 ms late")
    if schedule.cap_waits > 0:
        times = "once" if schedule.cap_waits == 1 else f"{schedule.cap_waits} times"
        facts.append(f"a due request found all {schedule.max_connections} connections busy {times}")
    if schedule.behind_ns > DELAY_TOLERANCE_NS:
        facts.append(f"it was {schedule.behind_ns / 1e6:.0f} ms behind the schedule at the end")
    facts.append(f"{keeping.in_flight_end} requests were still in flight")
    return (
        f"{level.describe()}: the client could not keep up with the desired request rate: "
        + ", ".join(facts)
        + "; latencies count from the late sends, so they understate the wait"
    )
