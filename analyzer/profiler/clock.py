"""The measurer's clock: `time.perf_counter_ns` (the clock of `RequestRecord`) and sleeps.

A protocol so tests can drive the measurer with a simulated clock.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    """Time for the measurer: `now_ns` on `perf_counter_ns`'s scale, and an async sleep."""

    def now_ns(self) -> int: ...

    async def sleep(self, seconds: float) -> None: ...


class MonotonicClock:
    """The real clock: `perf_counter_ns` (CLOCK_MONOTONIC, shared by processes on Linux)."""

    def now_ns(self) -> int:
        return time.perf_counter_ns()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def epoch_offset_ns() -> int:
    """What to add to a `perf_counter_ns` reading to get nanoseconds since the Unix epoch."""
    return time.time_ns() - time.perf_counter_ns()
