"""The dynamic batcher, with Triton's semantics; with batching off it is the default scheduler.

It runs on the event loop's thread and knows neither the transport nor the backend: requests
come in with a completion callback, batches go out to idle `InstanceWorker`s, results come back
by callback. A batch is formed only when an instance is idle, so under load requests pile up
and batch by themselves; when instances wait, the queue delay decides how long to hold a
partial batch. Delays under 1 ms cannot be timed by loop timers (they round to milliseconds),
so such a delay holds a batch for one loop pass: what arrived in the same pass joins it.
A queued request whose client goes away (its `Cancellation`) is answered CANCELLED at once and
never runs, as Triton does.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from common.invariant import InvariantError, present
from serve.backends.base import BatchTimes, RequestResult
from serve.backends.batching import batch_rows
from serve.errors import ServeError
from serve.inference import InferRequest
from serve.scheduler.instance_worker import InstanceWorker
from serve.scheduler.queue_policy import BatchingPolicy
from serve.scheduler.statistics import FailureReason, ModelStatistics

log = logging.getLogger("serve.scheduler")

Completion = Callable[[RequestResult], None]

_SUB_MS_NS = 1_000_000


@dataclass(slots=True, eq=False)
class _Pending:
    request: InferRequest
    on_done: Completion
    rows: int
    signature: tuple[object, ...]
    enqueue_ns: int
    level: int  # queue index; -1 once moved to the delayed queue
    seq: int = 0
    timer: asyncio.TimerHandle | None = None
    queued: bool = True
    dispatch_ns: int = 0
    on_cancel: Callable[[], None] | None = None  # listening to the request's Cancellation


def _leave_queue(pending: _Pending) -> None:
    """A request taken out of its queue no longer expires or listens for its client (which
    also breaks the reference cycle request -> cancellation -> listener -> pending)."""
    pending.queued = False
    if pending.timer is not None:
        pending.timer.cancel()
        pending.timer = None
    cancellation = pending.request.cancellation
    if pending.on_cancel is not None and cancellation is not None:
        cancellation.forget(pending.on_cancel)
        pending.on_cancel = None


def _signature(request: InferRequest) -> tuple[object, ...]:
    """Requests batch together only when every input has the same non-batch shape."""
    return tuple(sorted((name, array.shape[1:]) for name, array in request.inputs.items()))


class DynamicBatcher:
    """The scheduler of a model version without sequence batching (and of each lane of strategy
    oldest) over its instances' workers: `enqueue` a validated request, `close` at unload. Used
    on the event loop's thread only."""

    def __init__(
        self,
        policy: BatchingPolicy,
        workers: list[InstanceWorker],
        stats: ModelStatistics,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._policy = policy
        self._workers = list(workers)
        self._idle: list[InstanceWorker] = list(workers)
        self._stats = stats
        self._loop = loop
        self._queues: list[deque[_Pending]] = [deque() for _ in policy.level_policies]
        self._delayed: deque[_Pending] = deque()
        self._queued = 0
        self._in_flight = 0
        self._delay_ns = policy.max_queue_delay_us * 1000
        self._preferred = frozenset(policy.preferred_sizes)
        self._max_preferred = max(policy.preferred_sizes, default=0)
        self._timer: asyncio.TimerHandle | None = None
        self._pass_scheduled = False
        self._force_dispatch = False
        self._next_seq = 0
        self._next_delivery = 0
        self._finished: dict[int, tuple[_Pending, RequestResult]] = {}
        self._closing = False
        self._idle_event = asyncio.Event()
        self._idle_event.set()

    @property
    def queued(self) -> int:
        """Requests waiting for an instance (the pending-request gauge)."""
        return self._queued

    def enqueue(self, request: InferRequest, on_done: Completion) -> None:
        """Accept a validated request; `on_done` gets its result or a ServeError, exactly once."""
        now = time.monotonic_ns()
        if self._closing:
            self._stats.record_failure(0, FailureReason.OTHER)
            on_done(ServeError.unavailable(f"model '{request.model_name}' is being unloaded"))
            return
        level = self._policy.level_index(request.priority)
        queue_policy = self._policy.level_policies[level]
        queue = self._queues[level]
        if queue_policy.max_queue_size and len(queue) >= queue_policy.max_queue_size:
            self._stats.record_failure(0, FailureReason.REJECTED)
            on_done(ServeError.unavailable("Exceeds maximum queue size"))
            return
        cancellation = request.cancellation
        if cancellation is not None and cancellation.cancelled:
            self._stats.record_failure(0, FailureReason.CANCELED)
            on_done(ServeError.cancelled())
            return
        rows = batch_rows(request) if self._policy.max_batch_size > 0 else 1
        pending = _Pending(request, on_done, rows, _signature(request), now, level)
        pending.seq = self._next_seq
        self._next_seq += 1
        timeout_us = queue_policy.timeout_us(request.timeout_us)
        if timeout_us > 0:
            pending.timer = self._loop.call_later(timeout_us / 1e6, self._expire, pending)
        if cancellation is not None:
            pending.on_cancel = functools.partial(self._cancelled, pending)
            cancellation.listen(pending.on_cancel)
        queue.append(pending)
        self._queued += 1
        self._idle_event.clear()
        if self._idle:
            self._schedule()

    # -- forming and dispatching batches ------------------------------------------------------

    def _waiting(self) -> Iterator[_Pending]:
        for queue in self._queues:
            yield from queue
        yield from self._delayed

    def _schedule(self) -> None:
        while self._idle and self._queued:
            batch = self._next_batch()
            if batch is None:
                return
            worker = self._take_worker()
            if worker is None:
                return  # the rate limiter calls _schedule again when resources come free
            self._dispatch(batch, worker)

    def _take_worker(self) -> InstanceWorker | None:
        """An idle instance to run the next batch; under a rate limiter, one whose resources
        it could take (None: it waits for a release, its batch still queued)."""
        limits = self._idle[-1].limits
        if limits is None:
            return self._idle.pop()
        limiter = limits[0]
        holders = [(worker, worker.limits[1]) for worker in self._idle if worker.limits]
        chosen = limiter.acquire(holders)
        if chosen is None:
            limiter.wait(self._schedule, limiter.chances(holders))
            return None
        worker = next(w for w in self._idle if w is chosen)
        self._idle.remove(worker)
        return worker

    def _next_batch(self) -> list[_Pending] | None:
        """The batch to send now, or None to wait (with a timer or loop pass arranged)."""
        policy = self._policy
        if not policy.enabled:
            return [next(self._waiting())]
        chosen: list[_Pending] = []
        rows = 0
        preferred_cut = 0
        cannot_grow = False
        oldest = None
        for pending in self._waiting():
            if chosen:
                # As Triton: cut before the request that would pass the largest preferred size,
                # so a batch outgrows the preferred sizes only once the delay has expired.
                if (
                    self._max_preferred
                    and not preferred_cut
                    and rows + pending.rows > self._max_preferred
                ):
                    preferred_cut = len(chosen)
                if (
                    pending.signature != chosen[0].signature
                    or rows + pending.rows > policy.max_batch_size
                ):
                    cannot_grow = True
                    break
            chosen.append(pending)
            rows += pending.rows
            if oldest is None or pending.enqueue_ns < oldest:
                oldest = pending.enqueue_ns
            if rows in self._preferred:
                preferred_cut = len(chosen)
            if rows >= policy.max_batch_size:
                cannot_grow = True
                break
        waited = time.monotonic_ns() - present(oldest, "a batch is formed from queued requests")
        expired = self._force_dispatch or (self._delay_ns > 0 and waited >= self._delay_ns)
        # A preferred size goes out as such, delay or not, until the delay expires (Triton).
        if preferred_cut and not expired:
            return chosen[:preferred_cut]
        if cannot_grow or expired or self._delay_ns == 0:
            return chosen
        if self._delay_ns < _SUB_MS_NS:
            if not self._pass_scheduled:
                self._pass_scheduled = True
                self._loop.call_soon(self._after_pass)
        elif self._timer is None:
            self._timer = self._loop.call_later((self._delay_ns - waited) / 1e9, self._after_timer)
        return None

    def _after_pass(self) -> None:
        self._pass_scheduled = False
        self._force_dispatch = True
        try:
            self._schedule()
        finally:
            self._force_dispatch = False

    def _after_timer(self) -> None:
        self._timer = None
        self._schedule()

    def _dispatch(self, batch: list[_Pending], worker: InstanceWorker) -> None:
        now = time.monotonic_ns()
        for pending in batch:
            queue = self._delayed if pending.level < 0 else self._queues[pending.level]
            removed = queue.popleft()
            if removed is not pending:
                raise InvariantError("batches are taken from the front of the queues")
            pending.dispatch_ns = now
            _leave_queue(pending)
        self._queued -= len(batch)
        self._in_flight += 1
        worker.run([p.request for p in batch], functools.partial(self._batch_done, batch))

    def _batch_done(
        self,
        batch: list[_Pending],
        worker: InstanceWorker,
        results: list[RequestResult],
        times: BatchTimes,
    ) -> None:
        self._idle.append(worker)
        self._in_flight -= 1
        if worker.limits is not None:
            worker.limits[0].release(worker.limits[1])  # waiting instances first, by priority
        self._schedule()  # keep the instance busy before spending time on responses
        now = time.monotonic_ns()
        self._stats.record_execution(
            sum(p.rows for p in batch),
            times.compute_input_ns,
            times.compute_infer_ns,
            times.compute_output_ns,
        )
        self._stats.record_results(zip(batch, results, strict=True), times, now)
        for pending, result in zip(batch, results, strict=True):
            self._deliver(pending, result)
        self._note_idle()

    # -- timeouts, ordering, shutdown ---------------------------------------------------------

    def _expire(self, pending: _Pending) -> None:
        if not pending.queued:
            return
        policy = self._policy.level_policies[max(pending.level, 0)]
        if policy.delay_on_timeout:
            if pending.level >= 0:
                self._queues[pending.level].remove(pending)
                pending.level = -1
                self._delayed.append(pending)
            return
        self._drop(
            pending, FailureReason.REJECTED, ServeError.unavailable("Request timeout expired")
        )

    def _cancelled(self, pending: _Pending) -> None:
        """A queued request's client went away: it is answered now and never runs."""
        if pending.queued:
            self._drop(pending, FailureReason.CANCELED, ServeError.cancelled())

    def _drop(self, pending: _Pending, reason: FailureReason, error: ServeError) -> None:
        """Take a queued request out of its queue and fail it with `error`."""
        queue = self._delayed if pending.level < 0 else self._queues[pending.level]
        queue.remove(pending)
        _leave_queue(pending)
        self._queued -= 1
        self._stats.record_failure(time.monotonic_ns() - pending.enqueue_ns, reason)
        self._deliver(pending, error)
        self._note_idle()
        if self._idle:
            self._schedule()

    def _deliver(self, pending: _Pending, result: RequestResult) -> None:
        if not self._policy.preserve_ordering:
            self._complete(pending, result)
            return
        self._finished[pending.seq] = (pending, result)
        while self._next_delivery in self._finished:
            ready, ready_result = self._finished.pop(self._next_delivery)
            self._next_delivery += 1
            self._complete(ready, ready_result)

    @staticmethod
    def _complete(pending: _Pending, result: RequestResult) -> None:
        try:
            pending.on_done(result)
        except Exception:  # a broken callback must not stall the batcher
            log.exception("completion callback failed for request '%s'", pending.request.id)

    def _note_idle(self) -> None:
        if self._queued == 0 and self._in_flight == 0:
            self._idle_event.set()

    async def close(self) -> None:
        """Stop accepting, let queued and running requests finish, then unload the instances."""
        self._closing = True
        await self._idle_event.wait()
        if self._timer is not None:
            self._timer.cancel()
        for worker in self._workers:
            await asyncio.to_thread(worker.close)
