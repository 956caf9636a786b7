"""Runs one model instance's batches, one batch at a time: on a thread of its own, or inline on
the event loop when the model is so quick that handing over to a thread costs more.

Handing a batch to a thread and its results back costs two thread wake-ups and GIL hand-overs
(measured here: about a third of the throughput of a model that computes in ~50 us). A batch
that recently took less than `INLINE_BELOW_NS` therefore runs on the loop's thread; anything
slower, every batch before the first measurement, and every batch of a backend that may wait on
something else (`ModelInstance.inline_when_quick` False), runs on the instance's own thread.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from serve.backends.base import BatchTimes, ModelInstance, RequestResult, Rescheduled
from serve.errors import ServeError
from serve.inference import InferRequest
from serve.scheduler.rate_limiter import InstanceNeeds, RateLimiter

BatchDone = Callable[["InstanceWorker", list[RequestResult], BatchTimes], None]

INLINE_BELOW_NS = 100_000
_SMOOTHING = 0.2  # weight of the newest batch in the moving average of batch durations


class InstanceWorker:
    """Owns a ModelInstance and the single thread that executes it."""

    def __init__(self, instance: ModelInstance, loop: asyncio.AbstractEventLoop) -> None:
        self.instance = instance
        self.name = instance.context.instance_name
        self._loop = loop
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self.name)
        self._busy = threading.Event()
        self._recent_ns: float | None = None  # moving average of batch durations
        # Set by a scheduler that runs rescheduled requests again (iterative sequences); for
        # any other, a Rescheduled result becomes the plain error it carries.
        self.reschedules = False
        # Set where the server rate-limits (--rate-limit execution_count): the limiter and what
        # this instance holds while it executes; schedulers acquire it before each batch.
        self.limits: tuple[RateLimiter, InstanceNeeds] | None = None

    @property
    def busy(self) -> bool:
        return self._busy.is_set()

    def run(self, requests: Sequence[InferRequest], on_done: BatchDone) -> None:
        """Start executing `requests`; `on_done` is called later on the event loop's thread."""
        if self._busy.is_set():
            raise RuntimeError(f"instance {self.name} is already executing a batch")
        self._busy.set()
        times = BatchTimes()
        times.start_ns = time.monotonic_ns()
        finish = functools.partial(self._finish_begun, len(requests), times, on_done)
        if self.instance.begin(requests, times, finish):
            return
        recent = self._recent_ns
        if self.instance.inline_when_quick and recent is not None and recent < INLINE_BELOW_NS:
            results = self._execute(requests, times)
            self._loop.call_soon(on_done, self, results, times)
        else:
            self._executor.submit(self._execute_on_thread, requests, times, on_done)

    def _finish_begun(
        self, count: int, times: BatchTimes, on_done: BatchDone, results: list[RequestResult]
    ) -> None:
        """A batch the instance ran without a thread has ended (on the loop's thread)."""
        results = self._one_per_request(results, count)
        self._ended(times)
        on_done(self, results, times)

    def _ended(self, times: BatchTimes) -> None:
        times.end_ns = time.monotonic_ns()
        elapsed = times.end_ns - times.start_ns
        recent = self._recent_ns
        self._recent_ns = elapsed if recent is None else recent + _SMOOTHING * (elapsed - recent)
        self._busy.clear()

    def _execute_on_thread(
        self, requests: Sequence[InferRequest], times: BatchTimes, on_done: BatchDone
    ) -> None:
        results = self._execute(requests, times)
        self._loop.call_soon_threadsafe(on_done, self, results, times)

    def _execute(self, requests: Sequence[InferRequest], times: BatchTimes) -> list[RequestResult]:
        times.start_ns = time.monotonic_ns()  # on the thread that runs it: no hand-over counted
        try:
            results = self._one_per_request(self.instance.execute(requests, times), len(requests))
        except ServeError as exc:
            results = [exc] * len(requests)
        except Exception as exc:  # a backend bug must fail its batch, not the server
            error = ServeError.internal(f"{self.name}: {type(exc).__name__}: {exc}")
            results = [error] * len(requests)
        self._ended(times)
        return results

    def _one_per_request(self, results: list[RequestResult], count: int) -> list[RequestResult]:
        if len(results) == count:
            if self.reschedules:
                return results
            return [
                ServeError(r.kind, r.message) if isinstance(r, Rescheduled) else r for r in results
            ]
        error = ServeError.internal(
            f"{self.name}: backend returned {len(results)} results for {count} requests"
        )
        return [error] * count

    def run_blocking(self, requests: Sequence[InferRequest]) -> list[RequestResult]:
        """Execute on the instance's thread and wait (used for warmup, before serving)."""
        times = BatchTimes()
        return self._executor.submit(self.instance.execute, requests, times).result()

    def close(self) -> None:
        """Unload the instance on its own thread, then stop the thread."""
        try:
            self._executor.submit(self.instance.unload).result()
        finally:
            self._executor.shutdown(wait=True)
