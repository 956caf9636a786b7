"""A simulated load driver, clock and statistics source for the measurer's unit tests.

Requests complete on a schedule computed from a latency model: at concurrency c with latency
L each of the c slots completes every L, so completions are L / c apart; at a request rate r
they are 1 / r apart. Time only moves when the measurer sleeps, so runs are instant and exact.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from analyzer.load.base import LoadDriver, LoadLevel, RequestRecord
from analyzer.profiler.server_stats import ServerCounters

LatencyModel = Callable[[LoadLevel, int], float]  # (level, window-ish index) -> latency us


class FakeClock:
    def __init__(self, start_ns: int = 1_000_000_000) -> None:
        self.ns = start_ns
        self.sleeps: list[float] = []

    def now_ns(self) -> int:
        return self.ns

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.ns += int(seconds * 1e9)


@dataclass
class ServerModel:
    """Per-request server durations (us) the fake statistics report."""

    queue_us: float = 100.0
    compute_input_us: float = 20.0
    compute_infer_us: float = 500.0
    compute_output_us: float = 10.0
    overhead_us: float = 30.0


class FakeDriver(LoadDriver):
    """Completes requests on the latency model's schedule; `fail_every` N-th request fails."""

    def __init__(
        self,
        clock: FakeClock,
        latency_us: LatencyModel,
        *,
        send_us: float = 10.0,
        recv_us: float = 5.0,
        fail_every: int = 0,
        error: str = "model failed",
        batch_size: int = 1,
    ) -> None:
        self.clock = clock
        self.latency_us = latency_us
        self.send_us = send_us
        self.recv_us = recv_us
        self.fail_every = fail_every
        self.error = error
        self.batch_size = batch_size
        self.level = LoadLevel()
        self.completed = 0
        self.ok_count = 0
        self.collects = 0
        self.started = False
        self.stopped = False
        self.levels: list[LoadLevel] = []
        self._next_end = 0

    def _gap_ns(self, latency_ns: float) -> float:
        if self.level.concurrency:
            return latency_ns / self.level.concurrency
        return 1e9 / self.level.request_rate

    async def start(self, level: LoadLevel) -> None:
        self.started = True
        await self.change(level)

    async def change(self, level: LoadLevel) -> None:
        self.level = level
        self.levels.append(level)
        self._next_end = self.clock.now_ns() + 1

    async def collect(self) -> list[RequestRecord]:
        self.collects += 1
        records = []
        now = self.clock.now_ns()
        while self._next_end <= now:
            latency_ns = self.latency_us(self.level, self.collects) * 1000
            self.completed += 1
            ok = not (self.fail_every and self.completed % self.fail_every == 0)
            self.ok_count += ok
            end = self._next_end
            records.append(
                RequestRecord(
                    start_ns=int(end - latency_ns),
                    end_ns=end,
                    send_ns=int(self.send_us * 1000),
                    recv_ns=int(self.recv_us * 1000),
                    ok=ok,
                    error="" if ok else self.error,
                )
            )
            self._next_end = end + max(1, int(self._gap_ns(latency_ns)))
        return records

    async def stop(self) -> list[RequestRecord]:
        self.stopped = True
        return []

    @property
    def in_flight(self) -> int:
        if self.level.concurrency:
            return self.level.concurrency
        return int(self.level.request_rate * self.latency_us(self.level, self.collects) / 1e6)


class FakeStats:
    """Server counters that follow the driver: every successful request adds the model's
    durations; one execution per request."""

    def __init__(self, driver: FakeDriver, server: ServerModel | None = None) -> None:
        self.driver = driver
        self.server = server or ServerModel()
        self.snapshots = 0

    async def snapshot(self) -> ServerCounters | None:
        self.snapshots += 1
        n = self.driver.ok_count
        s = self.server
        total = s.queue_us + s.compute_input_us + s.compute_infer_us + s.compute_output_us
        total += s.overhead_us

        def ns(us: float) -> int:
            return int(n * us * 1000)

        return ServerCounters(
            inference_count=n * self.driver.batch_size,
            execution_count=n,
            success_count=n,
            success_ns=ns(total),
            queue_count=n,
            queue_ns=ns(s.queue_us),
            compute_input_count=n,
            compute_input_ns=ns(s.compute_input_us),
            compute_infer_count=n,
            compute_infer_ns=ns(s.compute_infer_us),
            compute_output_count=n,
            compute_output_ns=ns(s.compute_output_us),
        )
