"""The sequence batcher, with Triton's semantics, for stateful models (`sequence_batching`).

It runs on the event loop's thread and knows neither the transport nor the backend, like the
dynamic batcher, and has the same face (enqueue / queued / close). Every request names its
sequence (`sequence_id`, with `sequence_start` on the first and `sequence_end` on the last);
a sequence is bound at its START to one slot of one instance (or waits in the backlog until a
slot frees), and its requests run in order, one at a time, on that instance. The model gets
the control inputs the config asks for and its implicit state with each request. A sequence
that sends nothing for max_sequence_idle_microseconds (default 1 s) loses its slot.

With `iterative_sequence` (Triton's iterative sequences), each request is a sequence of its
own: one without a sequence_id gets a fresh id and START; the model may release it for
rescheduling (a `Rescheduled` result), and it runs again from its slot in a later batch, with
its START and END flags cleared, until the model answers it; then its slot is freed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import time

from tritonclient.grpc import model_config_pb2 as mc

from serve.backends.base import RequestResult, Rescheduled
from serve.errors import ServeError
from serve.inference import InferRequest
from serve.scheduler.base import Completion
from serve.scheduler.instance_worker import InstanceWorker
from serve.scheduler.queue_policy import BatchingPolicy, QueuePolicy
from serve.scheduler.sequence_inputs import SequenceInputs
from serve.scheduler.sequence_lanes import DirectLane, OldestLane, SeqSlot
from serve.scheduler.sequence_request import (
    SequenceFlags,
    SequenceId,
    SequencePending,
    sequence_flags,
)
from serve.scheduler.sequence_slots import SlotTable
from serve.scheduler.statistics import FailureReason, ModelStatistics

log = logging.getLogger("serve.scheduler")

DEFAULT_IDLE_US = 1_000_000  # Triton's max_sequence_idle_microseconds default
_BACKLOG_IDLE_RECHECK_S = 0.05  # an idle backlogged sequence is looked at again this often


def _oldest_policy(config: mc.ModelConfig) -> BatchingPolicy:
    oldest = config.sequence_batching.oldest
    return BatchingPolicy(
        enabled=True,
        max_batch_size=max(1, config.max_batch_size),
        preferred_sizes=tuple(sorted(set(oldest.preferred_batch_size))),
        max_queue_delay_us=oldest.max_queue_delay_microseconds,
        preserve_ordering=oldest.preserve_ordering,
        priority_levels=0,
        default_priority_level=0,
        level_policies=(QueuePolicy(),),
    )


class SequenceBatcher:
    """One stateful model version's scheduler (see above), with one lane per instance running the
    sequences bound to its slots. Used on the event loop's thread only."""

    def __init__(
        self,
        config: mc.ModelConfig,
        inputs: SequenceInputs,
        workers: list[InstanceWorker],
        stats: ModelStatistics,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        batching = config.sequence_batching
        self._model = config.name
        self._batched = config.max_batch_size > 0
        self._iterative = batching.iterative_sequence
        self._auto_ids = itertools.count(1)
        if self._iterative:
            for worker in workers:
                worker.reschedules = True
        self._inputs = inputs
        self._stats = stats
        self._loop = loop
        oldest = batching.HasField("oldest")
        slots = max(1, config.max_batch_size)
        if oldest and batching.oldest.max_candidate_sequences > 0:
            slots = batching.oldest.max_candidate_sequences
        self._table: SlotTable[SequencePending] = SlotTable(config.name, len(workers), slots)
        self._idle_s = (batching.max_sequence_idle_microseconds or DEFAULT_IDLE_US) / 1e6
        self._lanes: list[DirectLane | OldestLane] = []
        for worker, lane_slots in zip(workers, self._table.slots, strict=True):
            if oldest:
                policy = _oldest_policy(config)
                self._lanes.append(OldestLane(self, worker, lane_slots, policy, stats, loop))
            else:
                direct = batching.direct
                self._lanes.append(
                    DirectLane(
                        self,
                        worker,
                        lane_slots,
                        inputs.controls(False, False, False, 0),
                        direct.max_queue_delay_microseconds,
                        direct.minimum_slot_utilization,
                        stats,
                        loop,
                    )
                )
        self._last_seen: dict[SequenceId, float] = {}
        self._reapers: dict[SequenceId, asyncio.TimerHandle] = {}
        self._waiting = 0  # in slot queues and the backlog
        self._running = 0  # handed to a lane, not yet completed
        self._closing = False
        self._idle_event = asyncio.Event()
        self._idle_event.set()

    @property
    def queued(self) -> int:
        """Requests waiting for an instance (the pending-request gauge)."""
        return self._waiting + sum(lane.queued for lane in self._lanes)

    def enqueue(self, request: InferRequest, on_done: Completion) -> None:
        """Accept a validated request; `on_done` gets its result or a ServeError, exactly once."""
        try:
            auto_id = self._auto_id if self._iterative else None
            flags = sequence_flags(request, self._batched, auto_id)
            self._inputs.check_id(flags.id, self._model)
            if self._closing and flags.start:
                self._stats.record_failure(0, FailureReason.OTHER)
                raise ServeError.unavailable(
                    f"model '{self._model}' is being unloaded: its sequence batcher takes no "
                    "new sequences"
                )
            pending = SequencePending(request, on_done, flags, time.monotonic_ns())
            # An iterative sequence holds its slot until its request is answered, END or not.
            route = dataclasses.replace(flags, end=False) if self._iterative else flags
            slot = self._table.route(route, pending)
        except ServeError as exc:
            on_done(exc)
            return
        self._waiting += 1
        self._idle_event.clear()
        if not self._iterative:  # an iterative sequence is never idle: the server drives it
            self._touch(flags.id, flags.end)
        if slot is not None:
            self._lanes[slot.instance].wake()

    def _auto_id(self) -> SequenceId:
        """A sequence id no live sequence has (Triton counts them from 1)."""
        while True:
            candidate = next(self._auto_ids)
            if not self._table.known(candidate):
                return candidate

    # -- what the lanes ask ----------------------------------------------------------------

    def prepare(self, slot: SeqSlot, pending: SequencePending) -> InferRequest:
        flags = pending.flags
        if flags.start or slot.state is None:
            slot.state = self._inputs.initial_states()
        request = pending.request
        inputs = dict(request.inputs)
        inputs.update(self._inputs.controls(flags.start, flags.end, True, flags.id))
        inputs.update(slot.state)
        if self._iterative:  # the model sees the id given and the flags of this execution
            parameters = request.parameters | {
                "sequence_id": flags.id,
                "sequence_start": flags.start,
                "sequence_end": flags.end,
            }
            return dataclasses.replace(request, inputs=inputs, parameters=parameters)
        return dataclasses.replace(request, inputs=inputs)

    def dispatched(self, slot: SeqSlot, pending: SequencePending) -> None:
        self._waiting -= 1
        self._running += 1
        slot.in_flight += 1
        # Triton frees the slot as soon as its sequence's last request is on its way: a
        # backlogged sequence's requests queue behind it in the same slot.
        # An iterative sequence's slot frees when its request is answered (`_end_iterative`).
        if not self._iterative and (pending.flags.end or (slot.reap and not slot.queue)):
            self._table.release(slot)

    def complete(self, slot: SeqSlot, pending: SequencePending, result: RequestResult) -> None:
        slot.in_flight -= 1
        self._running -= 1
        if isinstance(result, Rescheduled):
            # Back in its slot for a later batch (the lane that ran it looks there next), with
            # its flags cleared as Triton clears them.
            pending.flags = SequenceFlags(pending.flags.id, False, False)
            slot.queue.append(pending)
            self._waiting += 1
            return
        if self._iterative:
            self._end_iterative(slot, pending.flags.id)
        if self._inputs.states and not isinstance(result, ServeError):
            missing = [s.output_name for s in self._inputs.states if s.output_name not in result]
            if missing:
                result = ServeError.internal(
                    f"model '{self._model}' did not produce the state output '{missing[0]}'"
                )
            else:
                slot.state = self._inputs.next_states(result)
        try:
            pending.on_done(result)
        except Exception:  # a broken callback must not stall the batcher
            log.exception("completion callback failed for request '%s'", pending.request.id)
        self._note_idle()

    def _end_iterative(self, slot: SeqSlot, sequence: SequenceId) -> None:
        """An iterative sequence's request was answered: the sequence ends (a new request with
        its id needs START) and its slot frees, now or once the requests queued in it (a START
        repeated with that id) have been answered too."""
        if self._table.bound(sequence) is slot:
            self._table.forget(sequence)
        if slot.sequence == sequence and not slot.queue and not slot.in_flight:
            # A backlogged sequence taking the slot runs when the lane looks at it next.
            self._table.release(slot)

    # -- idle sequences --------------------------------------------------------------------

    def _touch(self, sequence: SequenceId, end: bool) -> None:
        if end:
            self._last_seen.pop(sequence, None)
            timer = self._reapers.pop(sequence, None)
            if timer is not None:
                timer.cancel()
            return
        self._last_seen[sequence] = time.monotonic()
        if sequence not in self._reapers:
            self._reapers[sequence] = self._loop.call_later(
                self._idle_s, self._check_idle, sequence
            )

    def _check_idle(self, sequence: SequenceId) -> None:
        del self._reapers[sequence]
        last = self._last_seen.get(sequence)
        if last is None:
            return
        remaining = self._idle_s - (time.monotonic() - last)
        if remaining <= 0 and self._table.backlogged(sequence):
            remaining = _BACKLOG_IDLE_RECHECK_S  # it may hold no slot yet to free
        if remaining > 0:
            self._reapers[sequence] = self._loop.call_later(remaining, self._check_idle, sequence)
            return
        del self._last_seen[sequence]
        slot = self._table.forget(sequence)
        if slot is None:
            return
        log.info(
            "model '%s': sequence %s idle for over %g s; its slot is freed",
            self._model,
            sequence,
            self._idle_s,
        )
        if not slot.queue:
            if self._table.release(slot):
                self._lanes[slot.instance].wake()
            self._note_idle()

    # -- shutdown --------------------------------------------------------------------------

    def _note_idle(self) -> None:
        if self._waiting == 0 and self._running == 0:
            self._idle_event.set()

    async def close(self) -> None:
        """Stop taking new sequences, let queued and running requests finish (a backlogged
        sequence gets a slot when one ends or idles), then unload the instances."""
        self._closing = True
        await self._idle_event.wait()
        for timer in self._reapers.values():
            timer.cancel()
        self._reapers.clear()
        for lane in self._lanes:
            await lane.close()
