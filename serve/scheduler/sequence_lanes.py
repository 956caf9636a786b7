"""How one instance runs the sequences bound to its slots: Triton's two strategies.

`DirectLane` (strategy direct): a batch holds the next request of each of the instance's
slots, in slot order: a sequence keeps its row for its whole life, and an empty slot below the
highest busy one carries a not-ready row (READY=0, its other inputs zeros) so the rows stay in
place. With max_queue_delay_microseconds and minimum_slot_utilization both set, a batch waits
until that share of the slots has a request or its oldest request has waited that long.

`OldestLane` (strategy oldest): the next request of each candidate sequence goes to a dynamic
batcher of its own over this instance, so a batch holds the oldest sequences' next requests,
at most one per sequence (a sequence's next request is handed over only when its previous one
is done).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import Protocol

import numpy as np

from serve.backends.base import BatchTimes, RequestResult
from serve.errors import ServeError
from serve.inference import InferRequest
from serve.scheduler.dynamic_batcher import DynamicBatcher
from serve.scheduler.instance_worker import InstanceWorker
from serve.scheduler.queue_policy import BatchingPolicy
from serve.scheduler.sequence_request import SequencePending
from serve.scheduler.sequence_slots import Slot
from serve.scheduler.statistics import FailureReason, ModelStatistics

log = logging.getLogger("serve.scheduler")


SeqSlot = Slot[SequencePending]


class LaneOwner(Protocol):
    """What a lane asks of the sequence batcher that owns the slots."""

    def prepare(self, slot: SeqSlot, pending: SequencePending) -> InferRequest:
        """The request as the model gets it: its inputs plus control and state tensors."""
        ...

    def dispatched(self, slot: SeqSlot, pending: SequencePending) -> None:
        """`pending` left its slot's queue for the instance."""
        ...

    def complete(self, slot: SeqSlot, pending: SequencePending, result: RequestResult) -> None:
        """`pending` ran: keep its state, answer it."""
        ...


def _drop_cancelled(owner: LaneOwner, slot: SeqSlot, stats: ModelStatistics) -> None:
    """Answer the requests at the head of the slot's queue whose clients went away: they never
    run (a dropped sequence start leaves its sequence the initial state)."""
    queue = slot.queue
    while queue and queue[0].request.cancelled:
        pending = queue.popleft()
        if pending.flags.start:
            slot.state = None
        owner.dispatched(slot, pending)
        stats.record_failure(time.monotonic_ns() - pending.enqueue_ns, FailureReason.CANCELED)
        owner.complete(slot, pending, ServeError.cancelled())


def _signature(request: InferRequest) -> tuple[object, ...]:
    return tuple(sorted((name, array.shape[1:]) for name, array in request.inputs.items()))


def _zeros(array: np.ndarray) -> np.ndarray:
    if array.dtype.kind == "O":
        empty = np.empty(array.shape, dtype=np.object_)
        empty.fill(b"")
        return empty
    return np.zeros_like(array)


class DirectLane:
    """One instance's lane with strategy direct (see above). `wake` is called when a slot's queue
    may have a request to run."""

    def __init__(
        self,
        owner: LaneOwner,
        worker: InstanceWorker,
        slots: list[SeqSlot],
        not_ready: dict[str, np.ndarray],
        config_delay_us: int,
        minimum_slot_utilization: float,
        stats: ModelStatistics,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._owner = owner
        self._worker = worker
        self._slots = slots
        self._not_ready = not_ready  # the control tensors of a not-ready row
        self._delay_ns = config_delay_us * 1000
        self._utilization = minimum_slot_utilization
        self._stats = stats
        self._loop = loop
        self._busy = False
        self._timer: asyncio.TimerHandle | None = None

    queued = 0  # a lane holds nothing back: what waits is in the slots' queues

    def wake(self) -> None:
        if not self._busy:
            self._try()

    def _on_timer(self) -> None:
        self._timer = None
        self.wake()

    def _try(self) -> None:
        for slot in self._slots:
            _drop_cancelled(self._owner, slot, self._stats)
        heads = [slot for slot in self._slots if slot.queue]
        if not heads:
            return
        if self._delay_ns and self._utilization > 0:
            waited = time.monotonic_ns() - min(slot.queue[0].enqueue_ns for slot in heads)
            if waited <= self._delay_ns and len(heads) / len(self._slots) < self._utilization:
                if self._timer is None:
                    delay_s = (self._delay_ns - waited) / 1e9
                    self._timer = self._loop.call_later(delay_s, self._on_timer)
                return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        signature = _signature(heads[0].queue[0].request)
        # Rows up to the highest slot whose next request batches with the first one; a slot
        # with none (or one of another shape, which waits for a later batch) is not ready.
        joining = [slot for slot in heads if _signature(slot.queue[0].request) == signature]
        top = joining[-1].index
        rows: list[tuple[SeqSlot, SequencePending | None]] = []
        requests: list[InferRequest | None] = []
        now = time.monotonic_ns()
        for slot in self._slots[: top + 1]:
            if not slot.queue or _signature(slot.queue[0].request) != signature:
                rows.append((slot, None))
                requests.append(None)
                continue
            pending = slot.queue.popleft()
            pending.dispatch_ns = now
            requests.append(self._owner.prepare(slot, pending))
            rows.append((slot, pending))
            self._owner.dispatched(slot, pending)
        model_requests = self._fill(requests)
        self._busy = True
        self._worker.run(model_requests, functools.partial(self._done, rows))

    def _fill(self, requests: list[InferRequest | None]) -> list[InferRequest]:
        """Not-ready rows: a ready request's inputs as zeros, with not-ready controls."""
        model = next(r for r in requests if r is not None)
        filler: InferRequest | None = None
        filled: list[InferRequest] = []
        for request in requests:
            if request is None:
                if filler is None:
                    inputs = {name: _zeros(array) for name, array in model.inputs.items()}
                    inputs.update(self._not_ready)
                    filler = InferRequest(
                        model_name=model.model_name,
                        model_version=model.model_version,
                        inputs=inputs,
                        input_datatypes={},
                        requested_outputs=model.requested_outputs,
                    )
                request = filler
            filled.append(request)
        return filled

    def _done(
        self,
        rows: list[tuple[SeqSlot, SequencePending | None]],
        worker: InstanceWorker,
        results: list[RequestResult],
        times: BatchTimes,
    ) -> None:
        self._busy = False
        now = time.monotonic_ns()
        ran = [
            (slot, pending, result)
            for (slot, pending), result in zip(rows, results, strict=True)
            if pending is not None
        ]
        self._stats.record_execution(
            len(ran), times.compute_input_ns, times.compute_infer_ns, times.compute_output_ns
        )
        self._stats.record_results(((p, r) for _slot, p, r in ran), times, now)
        for slot, pending, result in ran:
            self._owner.complete(slot, pending, result)
        self._try()

    async def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        await asyncio.to_thread(self._worker.close)


class OldestLane:
    """One instance's lane with strategy oldest (see above): the candidate sequences' next requests
    batched by a `DynamicBatcher` over this one instance."""

    def __init__(
        self,
        owner: LaneOwner,
        worker: InstanceWorker,
        slots: list[SeqSlot],
        policy: BatchingPolicy,
        stats: ModelStatistics,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._owner = owner
        self._slots = slots
        self._stats = stats
        self._batcher = DynamicBatcher(policy, [worker], stats, loop)

    @property
    def queued(self) -> int:
        return self._batcher.queued

    def wake(self) -> None:
        for slot in self._slots:
            if slot.queue and not slot.in_flight:
                self._issue(slot)

    def _issue(self, slot: SeqSlot) -> None:
        _drop_cancelled(self._owner, slot, self._stats)
        if not slot.queue:
            return
        pending = slot.queue.popleft()
        pending.dispatch_ns = time.monotonic_ns()
        request = self._owner.prepare(slot, pending)
        self._owner.dispatched(slot, pending)
        self._batcher.enqueue(request, functools.partial(self._done, slot, pending))

    def _done(self, slot: SeqSlot, pending: SequencePending, result: RequestResult) -> None:
        self._owner.complete(slot, pending, result)
        if slot.queue and not slot.in_flight:
            self._issue(slot)

    async def close(self) -> None:
        await self._batcher.close()
