"""The in-process load driver: asyncio on the caller's running event loop.

Concurrency mode keeps N requests outstanding, one connection each: a finished request is
replaced from its completion callback on the same connection, with no Task per request.
Request-rate mode sends at precomputed times whatever is outstanding, taking an idle connection
or opening another (up to `max_connections`; past it a due send waits for a free one). Both
share one pool of keep-alive connections, so `change()` never closes any. Requests are prebuilt
bytes (HTTP requests, or serialized ModelInferRequests for gRPC: `analyzer.load.connectors`
opens connections of the target's transport), cycled in order. Request-rate sends are counted
with those that left late (`schedule_progress`), so the measurer can tell a schedule the
client did not keep.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from time import perf_counter_ns

from analyzer.load.base import (
    DELAY_TOLERANCE_NS,
    LoadDriver,
    LoadLevel,
    RequestRecord,
    ScheduleProgress,
)
from analyzer.load.connectors import HTTP, TRANSPORTS, Connection, Connector, make_connector
from analyzer.load.options import DEFAULT_MAX_CONNECTIONS
from analyzer.load.schedule import ScheduleSpec, send_delays_ns
from analyzer.load.sequence_requests import SequenceSender, SequenceSource
from common.invariant import present
from protocol.client.http import Endpoint
from protocol.client.infer_connection import RawRecord

# A sequence model's record: RawRecord's fields and the request's sequence id.
SequenceRecord = tuple[int, int, int, int, bool, str, int]

RETRY_DELAY_S = 0.05  # before replacing a connection that could not be opened
PREOPEN_PER_RATE = 0.002  # connections opened before request-rate mode starts: 2 ms of sends
PREOPEN_MAX = 16
EARLY_NS = 500_000  # loop timers round to ~1 ms: send up to 0.5 ms early rather than late


@dataclass(frozen=True, slots=True)
class InferTarget:
    """Where and what to send: the server, its requests (complete HTTP requests, or
    serialized ModelInferRequests for gRPC), the transport, and gRPC metadata (-H)."""

    endpoint: Endpoint
    requests: tuple[bytes, ...]
    transport: str = HTTP  # http | grpc | grpc_stream
    metadata: tuple[tuple[str, str], ...] = ()
    # A sequence model's load: requests are framed per send with their sequence parameters
    # (`requests` is then unused).
    sequences: SequenceSource | None = None

    def __post_init__(self) -> None:
        if not self.requests and self.sequences is None:
            raise ValueError("an InferTarget needs at least one request")
        if self.transport not in TRANSPORTS:
            raise ValueError(f"unknown transport '{self.transport}'")


IDLE = LoadLevel()  # send nothing, keep the connections: a worker process's zero share


def check_level(level: LoadLevel) -> None:
    """ValueError unless `level` is a concurrency or a request rate (not both, neither
    negative); all zero is `IDLE`."""
    if (
        level.concurrency < 0
        or level.request_rate < 0
        or (level.concurrency and level.request_rate)
    ):
        raise ValueError(f"a load level needs a concurrency or a request rate: {level}")


class AsyncLoadDriver(LoadDriver):
    """Sends from the running event loop (this process).

    Besides the contract's levels it accepts `IDLE` (send nothing, keep the connections).
    """

    def __init__(
        self,
        target: InferTarget,
        schedule: ScheduleSpec | None = None,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        drain_timeout_s: float = 30.0,
    ) -> None:
        self._target = target
        self._schedule = schedule or ScheduleSpec()
        self._max_connections = max_connections
        self._drain_timeout_s = drain_timeout_s
        self._address = target.endpoint.address
        self._requests = target.requests
        self._next_request = 0
        self._records: list[RawRecord | SequenceRecord] = []
        self._sequences = (
            SequenceSender(target.sequences, self._schedule.seed)
            if target.sequences is not None
            else None
        )
        self._connector: Connector = make_connector(
            target.transport, target.endpoint, target.metadata
        )
        self._connections: set[Connection] = set()
        self._idle: list[Connection] = []
        self._in_flight = 0
        self._concurrency = 0
        self._running = False
        self._delays: Iterator[int] | None = None  # request-rate mode's schedule
        self._next_send_ns = 0
        self._timer: asyncio.TimerHandle | None = None
        self._starved = False  # a due send waits for a connection (at max_connections)
        self._sent_on_schedule = 0  # request-rate sends, and how many of them left late
        self._delayed = 0
        self._cap_waits = 0
        self._retry: asyncio.TimerHandle | None = None
        self._drained: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    @property
    def schedule_progress(self) -> ScheduleProgress:
        behind = 0
        if self._starved and self._delays is not None:
            behind = max(0, perf_counter_ns() - self._next_send_ns)
        return ScheduleProgress(
            sent=self._sent_on_schedule,
            delayed=self._delayed,
            cap_waits=self._cap_waits,
            behind_ns=behind,
            max_connections=self._max_connections,
        )

    async def start(self, level: LoadLevel) -> None:
        if self._running:
            raise RuntimeError("the driver is already started")
        self._loop = asyncio.get_running_loop()
        self._running = True
        await self.change(level)

    async def change(self, level: LoadLevel) -> None:
        check_level(level)
        if not self._running:
            raise RuntimeError("the driver is not started")
        self._stop_schedule()
        if self._sequences is not None:
            if level.concurrency:
                self._sequences.use_concurrency(level.concurrency)
            elif level.request_rate:
                self._sequences.use_rate()
        if level.concurrency:
            # Connect first (the old level keeps running meanwhile) so that no request's
            # latency includes connecting.
            await self._open_idle(level.concurrency - self._in_flight - len(self._idle))
            self._concurrency = level.concurrency
            self._fill()
        else:
            self._concurrency = 0
        if level.request_rate:
            # A few connections up front; more open on demand when the server falls behind.
            wanted = min(PREOPEN_MAX, 1 + int(level.request_rate * PREOPEN_PER_RATE))
            await self._open_idle(wanted - len(self._idle))
            self._delays = send_delays_ns(level.request_rate, self._schedule)
            self._next_send_ns = perf_counter_ns() + next(self._delays)
            self._tick()

    async def collect(self) -> list[RequestRecord]:
        return [RequestRecord(*raw) for raw in self.take_raw()]

    def take_raw(self) -> list[RawRecord | SequenceRecord]:
        """The raw records completed since the last call (what worker processes send)."""
        records, self._records = self._records, []
        return records

    async def stop(self) -> list[RequestRecord]:
        await self.stop_sending()
        return await self.collect()

    async def stop_sending(self, drain_timeout_s: float | None = None) -> None:
        """Stop sending, wait for the requests in flight (failing them after the drain
        timeout, the constructor's by default), and close every connection."""
        timeout_s = self._drain_timeout_s if drain_timeout_s is None else drain_timeout_s
        self._running = False
        self._concurrency = 0
        self._stop_schedule()
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        if self._sequences is not None and timeout_s > 0:
            self._close_idle_sequences()
        if self._in_flight and timeout_s > 0:
            self._drained = asyncio.Event()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._drained.wait(), timeout_s)
        for connection in list(self._connections):
            connection.close(
                f"no response from the server at {self._address} within {timeout_s:g} s of stopping"
            )
        self._connections.clear()
        self._idle.clear()
        await self._connector.close()
        await asyncio.sleep(0)  # let the transports finish closing

    # sending

    def _fill(self) -> None:
        while self._running and self._in_flight < self._concurrency:
            connection = self._take_connection()
            if connection is None:
                return
            self._send(connection)

    def _send(self, connection: Connection) -> None:
        self._in_flight += 1
        if self._sequences is not None:
            connection.send(self._sequences.take(connection))
            return
        requests = self._requests
        index = self._next_request
        self._next_request = index + 1
        connection.send(requests[index % len(requests)])

    def _close_idle_sequences(self) -> None:
        """Stopping: a last request (sequence_end) for each open sequence with nothing
        outstanding; those with a request outstanding are closed when it is answered."""
        sequences = present(self._sequences, "only a sequence load closes sequences")
        for slot in sequences.open_idle_slots():
            connection = self._take_connection()
            if connection is None:
                return  # at the cap: the server's idle timeout frees the rest
            request = sequences.closing(connection, slot)
            if request is not None:
                self._in_flight += 1
                connection.send(request)

    def _take_connection(self) -> Connection | None:
        idle = self._idle
        while idle:
            connection = idle.pop()  # the most recently used: the least likely to have timed out
            if not connection.closed:
                return connection
            self._connections.discard(connection)  # the server closed it while idle
        if len(self._connections) >= self._max_connections:
            return None
        connection = self._connector.new(self._on_done)
        self._connections.add(connection)
        loop = present(self._loop, "connections are opened while the load runs")
        loop.create_task(self._connector.connect(connection))
        return connection

    async def _open_idle(self, count: int) -> None:
        """Open `count` more connections (within the cap) before sending, so connecting is
        not timed."""
        count = min(count, self._max_connections - len(self._connections))
        if count <= 0:
            return
        fresh = [self._connector.new(self._on_done) for _ in range(count)]
        self._connections.update(fresh)
        await asyncio.gather(*(self._connector.connect(c) for c in fresh))
        for connection in fresh:
            if connection.closed:  # could not connect: sending will retry and record it
                self._connections.discard(connection)
            else:
                self._idle.append(connection)

    def _on_done(self, connection: Connection, record: RawRecord) -> None:
        sequences = self._sequences
        if sequences is not None:
            slot = sequences.done(connection)
            self._records.append((*record, slot.sequence_id))
            self._in_flight -= 1
            if not self._running and not connection.closed and self._drained is not None:
                closing = sequences.closing(connection, slot)
                if closing is not None:
                    self._in_flight += 1
                    connection.send(closing)
                    return
        else:
            self._records.append(record)
            self._in_flight -= 1
        if not connection.closed:
            if self._in_flight < self._concurrency:
                self._send(connection)  # the hot path: replace the request on this connection
                return
            self._idle.append(connection)
        else:
            self._connections.discard(connection)
            if not connection.was_open and self._concurrency:
                self._retry_later()
                return
        if self._starved:
            self._starved = False
            self._tick()
        if self._in_flight < self._concurrency:
            self._fill()
        elif self._drained is not None and self._in_flight == 0:
            self._drained.set()

    def _retry_later(self) -> None:
        if self._retry is None and self._loop is not None:
            self._retry = self._loop.call_later(RETRY_DELAY_S, self._retry_now)

    def _retry_now(self) -> None:
        self._retry = None
        self._fill()

    def _tick(self) -> None:
        """Request-rate mode: send what is due, then sleep until the next send (a timer
        callback rather than a Task: the cheapest wake-up the loop has)."""
        self._timer = None
        delays = self._delays
        if delays is None:
            return
        now = perf_counter_ns()
        while self._next_send_ns <= now + EARLY_NS:
            if self._sequences is not None and not self._sequences.can_send():
                self._starved = True  # --serial-sequences: resume when a sequence frees
                return
            connection = self._take_connection()
            if connection is None:  # at max_connections: resume when one frees
                self._starved = True
                self._cap_waits += 1
                return
            self._sent_on_schedule += 1
            if now - self._next_send_ns > DELAY_TOLERANCE_NS:
                self._delayed += 1
            self._send(connection)
            self._next_send_ns += next(delays)
        loop = present(self._loop, "the schedule ticks while the load runs")
        self._timer = loop.call_later((self._next_send_ns - now) / 1e9, self._tick)

    def _stop_schedule(self) -> None:
        self._delays = None
        self._starved = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
