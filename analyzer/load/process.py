"""The load spread over worker processes, for loads one process cannot generate.

Each worker (`analyzer.load.worker`) runs its own `AsyncLoadDriver`. Concurrency and the cap
on connections are split as evenly as possible (7 over 3 workers: 3, 2, 2); in request-rate
mode every worker follows the
whole schedule but sends only its share of it (sends i, i+N, ...), so together they send
exactly the one-process schedule. Records stay in the workers until `collect()`, which fetches
them all as marshalled tuples in one message per worker and merges them in completion order.
Workers exit when `stop()` asks, and on their own when this process goes (end of their stdin).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import tempfile
from pathlib import Path
from typing import IO, Any

import analyzer
from analyzer.errors import AnalyzerError
from analyzer.load import channel
from analyzer.load.base import LoadDriver, LoadLevel, RequestRecord, ScheduleProgress
from analyzer.load.local import InferTarget, check_level
from analyzer.load.options import DEFAULT_MAX_CONNECTIONS
from analyzer.load.schedule import ScheduleSpec
from common.invariant import present

EXIT_TIMEOUT_S = 10.0


def split_concurrency(concurrency: int, workers: int) -> list[int]:
    """`concurrency` over `workers` as evenly as possible, larger shares first."""
    base, extra = divmod(concurrency, workers)
    return [base + (1 if index < extra else 0) for index in range(workers)]


class ProcessDriver(LoadDriver):
    """Sends from `workers` worker processes started on the first `start()`."""

    def __init__(
        self,
        target: InferTarget,
        schedule: ScheduleSpec,
        workers: int,
        drain_timeout_s: float = 30.0,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
    ) -> None:
        if workers < 1:
            raise ValueError("at least one worker process")
        if max_connections < workers:
            raise ValueError("at least one connection per worker process")
        self._target = target
        self._schedule = schedule
        self._count = workers
        self._drain_timeout_s = drain_timeout_s
        self._connection_shares = split_concurrency(max_connections, workers)
        self._workers: list[_Worker] = []
        self._in_flight = 0
        self._progress = ScheduleProgress()

    @property
    def in_flight(self) -> int:
        """As last reported by the workers (at the previous `collect()`)."""
        return self._in_flight

    @property
    def schedule_progress(self) -> ScheduleProgress:
        """As last reported by the workers (at the previous `collect()`)."""
        return self._progress

    @property
    def pids(self) -> list[int]:
        return [worker.process.pid for worker in self._workers]

    async def start(self, level: LoadLevel) -> None:
        if self._workers:
            raise RuntimeError("the driver is already started")
        check_level(level)
        try:
            self._workers = list(
                await asyncio.gather(*(_Worker.spawn(i) for i in range(self._count)))
            )
            target, schedule = self._target, self._schedule
            intervals = list(schedule.intervals_us) if schedule.intervals_us else None
            await self._ask_all(
                lambda w: (
                    "init",
                    target.endpoint.host,
                    target.endpoint.port,
                    list(target.requests),
                    schedule.distribution,
                    schedule.seed,
                    intervals,
                    w.index,
                    self._count,
                    self._drain_timeout_s,
                    self._connection_shares[w.index],
                    target.transport,
                    [list(pair) for pair in target.metadata],
                )
            )
            await self.change(level)
        except BaseException:
            await self._kill_all()
            raise

    async def change(self, level: LoadLevel) -> None:
        check_level(level)
        if not self._workers:
            raise RuntimeError("the driver is not started")
        shares = split_concurrency(level.concurrency, self._count)
        await self._ask_all(lambda w: ("level", shares[w.index], level.request_rate))

    async def collect(self) -> list[RequestRecord]:
        replies = await self._ask_all(lambda w: ("collect",))
        self._in_flight = sum(reply[2] for reply in replies)
        self._progress = _sum_progress([ScheduleProgress(*reply[3]) for reply in replies])
        return _merge(replies)

    async def stop(self) -> list[RequestRecord]:
        if not self._workers:
            return []
        try:
            replies = await self._ask_all(lambda w: ("stop",))
            await asyncio.gather(*(w.wait_exit(EXIT_TIMEOUT_S) for w in self._workers))
        finally:
            await self._kill_all()
        self._in_flight = 0
        return _merge(replies)

    async def _ask_all(self, command: Any) -> list[tuple[Any, ...]]:
        for worker in self._workers:
            worker.send(command(worker))
        try:
            return list(await asyncio.gather(*(w.reply() for w in self._workers)))
        except AnalyzerError:
            await self._kill_all()
            raise

    async def _kill_all(self) -> None:
        workers, self._workers = self._workers, []
        await asyncio.gather(*(worker.kill() for worker in workers))


class _Worker:
    def __init__(self, index: int, process: asyncio.subprocess.Process, stderr: IO[bytes]) -> None:
        self.index = index
        self.process = process
        self._stderr = stderr

    @classmethod
    async def spawn(cls, index: int) -> _Worker:
        root = str(Path(analyzer.__file__).resolve().parents[1])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
        stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed by kill())
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "analyzer.load.worker",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
            env=env,
        )
        return cls(index, process, stderr)

    def send(self, message: tuple[Any, ...]) -> None:
        stdin = present(self.process.stdin, "a load worker is started with a stdin pipe")
        stdin.write(channel.encode(message))

    async def reply(self) -> tuple[Any, ...]:
        stdout = present(self.process.stdout, "a load worker is started with a stdout pipe")
        reply = await channel.read(stdout)
        if reply is None:
            code = await self.process.wait()
            raise AnalyzerError(
                f"load worker process {self.index} exited unexpectedly (exit code {code})"
                + self._stderr_tail()
            )
        if reply[0] == "error":
            raise AnalyzerError(f"load worker process {self.index} failed: {reply[1]}")
        return reply

    async def wait_exit(self, timeout_s: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.process.wait(), timeout_s)

    async def kill(self) -> None:
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            await self.process.wait()
        if self.process.stdin is not None:
            self.process.stdin.close()
        self._stderr.close()

    def _stderr_tail(self) -> str:
        self._stderr.seek(0)
        text = self._stderr.read().decode("utf-8", "replace").strip()
        return f":\n{text[-2000:]}" if text else ""


def _merge(replies: list[tuple[Any, ...]]) -> list[RequestRecord]:
    records = [RequestRecord(*raw) for reply in replies for raw in reply[1]]
    if len(replies) > 1:
        records.sort(key=_end_ns)  # perf_counter_ns is CLOCK_MONOTONIC: one clock per machine
    return records


def _end_ns(record: RequestRecord) -> int:
    return record.end_ns


def _sum_progress(parts: list[ScheduleProgress]) -> ScheduleProgress:
    """The workers' shares of the schedule together: counts add up, the lag is the worst."""
    return ScheduleProgress(
        sent=sum(p.sent for p in parts),
        delayed=sum(p.delayed for p in parts),
        cap_waits=sum(p.cap_waits for p in parts),
        behind_ns=max((p.behind_ns for p in parts), default=0),
        max_connections=sum(p.max_connections for p in parts),
    )
