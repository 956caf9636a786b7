"""The contract between load generation and measurement.

A `LoadDriver` keeps sending requests from `start()` until `stop()`. The measurer calls
`collect()` at the end of each measurement window and gets the records of every request that
completed since the previous call, in completion order. Drivers run in this process (asyncio)
or spread over worker processes; the measurer does not know which.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One completed request, timed on the client with `time.perf_counter_ns()` clocks that are
    comparable within one process (each worker process sends its own records)."""

    start_ns: int  # just before the first byte was written
    end_ns: int  # when the whole response had been read
    send_ns: int  # time spent building and writing the request (client send)
    recv_ns: int  # time spent reading and decoding the response after its first byte
    ok: bool
    error: str = ""  # the server's or the transport's message when not ok
    sequence_id: int = 0  # for sequence models; 0 otherwise

    @property
    def latency_ns(self) -> int:
        return self.end_ns - self.start_ns


# A request-rate send that leaves more than this after its scheduled time is "delayed", as
# perf_analyzer counts them (its delay tolerance is 1 ms).
DELAY_TOLERANCE_NS = 1_000_000


@dataclass(frozen=True, slots=True)
class ScheduleProgress:
    """How well a request-rate schedule is kept, counted from the driver's start.

    The counters only grow, so the difference of two readings covers the time between them;
    `behind_ns` is a reading of the moment. Concurrency mode leaves everything at 0.
    """

    sent: int = 0  # requests sent on the schedule
    delayed: int = 0  # of them, sent more than DELAY_TOLERANCE_NS after their scheduled time
    cap_waits: int = 0  # times a due request found every connection busy, at the cap
    behind_ns: int = 0  # how overdue the next send already is (0 when the schedule is kept)
    max_connections: int = 0  # the cap on connections (summed over worker processes)

    def since(self, earlier: ScheduleProgress) -> ScheduleProgress:
        """The counts between `earlier` and this reading (behind_ns: this reading's)."""
        return ScheduleProgress(
            sent=self.sent - earlier.sent,
            delayed=self.delayed - earlier.delayed,
            cap_waits=self.cap_waits - earlier.cap_waits,
            behind_ns=self.behind_ns,
            max_connections=self.max_connections,
        )


@dataclass(frozen=True, slots=True)
class LoadLevel:
    """What a driver is asked to sustain: a concurrency or a request rate (one of them)."""

    concurrency: int = 0
    request_rate: float = 0.0  # requests per second

    def describe(self) -> str:
        if self.concurrency:
            return f"concurrency {self.concurrency}"
        return f"request rate {self.request_rate:g}/s"


class LoadDriver(abc.ABC):
    """Sends requests at a load level until stopped."""

    @abc.abstractmethod
    async def start(self, level: LoadLevel) -> None:
        """Begin sending at `level` (returns once sending is under way)."""

    @abc.abstractmethod
    async def change(self, level: LoadLevel) -> None:
        """Switch to another level without closing connections (a concurrency/rate sweep)."""

    @abc.abstractmethod
    async def collect(self) -> list[RequestRecord]:
        """Records of the requests completed since the last call."""

    @abc.abstractmethod
    async def stop(self) -> list[RequestRecord]:
        """Stop sending, wait for requests in flight, close; return their records."""

    @property
    @abc.abstractmethod
    def in_flight(self) -> int:
        """Requests sent and not yet answered (to tell a rate the client could not keep)."""

    @property
    def schedule_progress(self) -> ScheduleProgress:
        """How the request-rate schedule is kept (read at window boundaries); a driver that
        does not track it reports zeros."""
        return ScheduleProgress()
