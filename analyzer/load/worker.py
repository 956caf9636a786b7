"""A load worker process: runs an `AsyncLoadDriver` on its share of the load.

Started by `ProcessDriver` as `python -m analyzer.load.worker`. Commands arrive on stdin and
replies leave on the original stdout (`analyzer.load.channel` framing); anything else printed
goes to stderr. End of stdin means the parent has stopped or died: the worker closes its
connections and exits, so no worker outlives its parent. SIGINT is ignored: a Ctrl-C in the
terminal reaches the parent, which stops the workers itself.

Commands and replies:
  ("init", host, port, requests, distribution, seed, intervals_us, index, count, drain_s,
   max_connections, transport, metadata) -> ("ok",)
  ("level", concurrency, request_rate)  -> ("ok",)   (first one starts the driver)
  ("collect",)                          -> ("records", [raw record tuples], in_flight, progress)
  ("stop",)                             -> ("records", [...], 0, progress), then it exits
progress is the driver's `ScheduleProgress` as a tuple of its fields, in order.
  any failure                           -> ("error", message)
"""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

from analyzer.aio import run
from analyzer.load import channel
from analyzer.load.base import LoadLevel
from analyzer.load.local import AsyncLoadDriver, InferTarget
from analyzer.load.schedule import ScheduleSpec
from protocol.client.http import Endpoint


def main() -> None:
    """Answer the parent's commands until stdin ends (see the module docstring). Replies use
    a copy of stdout; stdout itself becomes stderr, so stray prints cannot corrupt them."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    replies_fd = os.dup(1)
    os.dup2(2, 1)  # stray prints must not corrupt the reply stream
    run(_serve(replies_fd))


async def _serve(replies_fd: int) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(0, "rb", buffering=0)
    )
    transport, _ = await loop.connect_write_pipe(
        asyncio.Protocol, os.fdopen(replies_fd, "wb", buffering=0)
    )
    worker = _Worker()
    while True:
        message = await channel.read(reader)
        if message is None:  # the parent has gone
            await worker.abandon()
            break
        try:
            reply = await worker.handle(message)
        except Exception as exc:
            reply = ("error", f"{type(exc).__name__}: {exc}")
        transport.write(channel.encode(reply))
        if message[0] == "stop":
            break
    transport.close()


class _Worker:
    def __init__(self) -> None:
        self._driver: AsyncLoadDriver | None = None
        self._started = False

    async def handle(self, message: tuple[Any, ...]) -> tuple[Any, ...]:
        kind = message[0]
        if kind == "init":
            (_, host, port, requests, distribution, seed, intervals, index, count, drain, cap) = (
                message[:11]
            )
            transport, metadata = message[11], tuple(tuple(pair) for pair in message[12])
            schedule = ScheduleSpec(
                distribution, seed, tuple(intervals) if intervals else None, index, count
            )
            target = InferTarget(Endpoint(host, port), tuple(requests), transport, metadata)
            self._driver = AsyncLoadDriver(
                target, schedule, max_connections=cap, drain_timeout_s=drain
            )
            return ("ok",)
        driver = self._driver
        if driver is None:
            raise RuntimeError(f"'{kind}' before 'init'")
        if kind == "level":
            level = LoadLevel(concurrency=message[1], request_rate=message[2])
            if self._started:
                await driver.change(level)
            else:
                await driver.start(level)
                self._started = True
            return ("ok",)
        if kind == "collect":
            return ("records", driver.take_raw(), driver.in_flight, _progress(driver))
        if kind == "stop":
            await driver.stop_sending()
            return ("records", driver.take_raw(), 0, _progress(driver))
        raise RuntimeError(f"unknown command '{kind}'")

    async def abandon(self) -> None:
        if self._driver is not None:
            await self._driver.stop_sending(drain_timeout_s=0)


def _progress(driver: AsyncLoadDriver) -> tuple[int, ...]:
    progress = driver.schedule_progress
    return (
        progress.sent,
        progress.delayed,
        progress.cap_waits,
        progress.behind_ns,
        progress.max_connections,
    )


if __name__ == "__main__":
    main()
