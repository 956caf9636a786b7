"""Runs one model instance's batches on a thread of its own, one batch at a time."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from serve.backends.base import BatchTimes, ModelInstance, RequestResult
from serve.errors import ServeError
from serve.inference import InferRequest

BatchDone = Callable[["InstanceWorker", list[RequestResult], BatchTimes], None]


class InstanceWorker:
    """Owns a ModelInstance and the single thread that executes it."""

    def __init__(self, instance: ModelInstance, loop: asyncio.AbstractEventLoop) -> None:
        self.instance = instance
        self.name = instance.context.instance_name
        self._loop = loop
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self.name)
        self._busy = threading.Event()

    @property
    def busy(self) -> bool:
        return self._busy.is_set()

    def run(self, requests: Sequence[InferRequest], on_done: BatchDone) -> None:
        """Start executing `requests`; `on_done` is called on the event loop's thread."""
        if self._busy.is_set():
            raise RuntimeError(f"instance {self.name} is already executing a batch")
        self._busy.set()
        self._executor.submit(self._execute, requests, on_done)

    def _execute(self, requests: Sequence[InferRequest], on_done: BatchDone) -> None:
        times = BatchTimes()
        try:
            results = self.instance.execute(requests, times)
            if len(results) != len(requests):
                raise ServeError.internal(
                    f"{self.name}: backend returned {len(results)} results "
                    f"for {len(requests)} requests"
                )
        except ServeError as exc:
            results = [exc] * len(requests)
        except Exception as exc:  # a backend bug must fail its batch, not the server
            results = [ServeError.internal(f"{self.name}: {type(exc).__name__}: {exc}")] * len(
                requests
            )
        self._busy.clear()
        self._loop.call_soon_threadsafe(on_done, self, results, times)

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
