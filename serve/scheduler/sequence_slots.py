"""Which sequence holds which (instance, slot), and the backlog of sequences waiting for one.

Triton's rules: a sequence is bound to a free slot at its START for its whole life; a request
of an unknown sequence without START is refused; when every slot is taken, a new sequence's
requests collect in a backlog queue of their own, and a slot freed by a sequence's END (or by
the idle reaper) goes to the oldest backlog queue, with the requests collected so far. Free
slots are handed out lowest slot index first, so sequences spread over the instances before
they share one. Pure bookkeeping: it runs nothing.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import numpy as np

from serve.errors import ServeError
from serve.scheduler.sequence_request import SequenceFlags, SequenceId

T = TypeVar("T")


@dataclass(eq=False)
class Slot(Generic[T]):
    """One sequence slot of one instance: the requests of the sequence bound to it, in order."""

    instance: int
    index: int  # the slot's row in its instance's batches
    queue: deque[T] = field(default_factory=deque)
    sequence: SequenceId | None = None  # the sequence bound to it; None when free
    reap: bool = False  # the idle reaper freed its sequence: release once its queue drains
    in_flight: int = 0  # requests of this slot handed to its instance and not yet done
    state: dict[str, np.ndarray] | None = None  # implicit state, by the model's input names


@dataclass(eq=False)
class _Backlog(Generic[T]):
    sequence: SequenceId
    items: deque[T] = field(default_factory=deque)
    ended: bool = False


class SlotTable(Generic[T]):
    """The slots of one model version's instances and the backlog (see above): `route` queues a
    request on its sequence's slot or in the backlog, `release` frees a slot for the backlog's
    oldest sequence."""

    def __init__(self, model: str, instances: int, slots_per_instance: int) -> None:
        self._model = model
        self.slots: list[list[Slot[T]]] = [
            [Slot(i, s) for s in range(slots_per_instance)] for i in range(instances)
        ]
        self._ready: list[tuple[int, int]] = [
            (s, i) for i in range(instances) for s in range(slots_per_instance)
        ]
        heapq.heapify(self._ready)
        self._bound: dict[SequenceId, Slot[T]] = {}
        self._backlog: deque[_Backlog[T]] = deque()
        self._backlogged: dict[SequenceId, _Backlog[T]] = {}

    @property
    def backlog_size(self) -> int:
        return sum(len(b.items) for b in self._backlog)

    def known(self, sequence: SequenceId) -> bool:
        return sequence in self._bound or sequence in self._backlogged

    def bound(self, sequence: SequenceId) -> Slot[T] | None:
        return self._bound.get(sequence)

    def backlogged(self, sequence: SequenceId) -> bool:
        return sequence in self._backlogged

    def route(self, flags: SequenceFlags, item: T) -> Slot[T] | None:
        """Queue `item` on its sequence's slot (returned) or in the backlog (None); raise
        ServeError(INVALID_ARGUMENT) for a sequence that was never started."""
        sequence = flags.id
        if not flags.start and not self.known(sequence):
            raise ServeError.invalid(
                f"inference request for sequence {sequence} to model '{self._model}' must "
                "specify the START flag on the first request of the sequence"
            )
        slot = self._bound.get(sequence)
        if slot is not None:
            slot.queue.append(item)
            if flags.end:
                del self._bound[sequence]
            return slot
        backlog = self._backlogged.get(sequence)
        if backlog is not None:
            backlog.items.append(item)
            if flags.end:
                backlog.ended = True
                del self._backlogged[sequence]
            return None
        if self._ready:
            index, instance = heapq.heappop(self._ready)
            slot = self.slots[instance][index]
            slot.sequence = sequence
            slot.queue.append(item)
            if not flags.end:
                self._bound[sequence] = slot
            return slot
        backlog = _Backlog(sequence, deque([item]), flags.end)
        self._backlog.append(backlog)
        if not flags.end:
            self._backlogged[sequence] = backlog
        return None

    def forget(self, sequence: SequenceId) -> Slot[T] | None:
        """Unbind an idle sequence (the reaper): its slot, to release once its queue drains."""
        slot = self._bound.pop(sequence, None)
        if slot is not None:
            slot.reap = True
        return slot

    def release(self, slot: Slot[T]) -> bool:
        """Free `slot` (its sequence ended or idled): the oldest backlogged sequence takes it
        with its requests so far (True), or it becomes free (False)."""
        slot.reap = False
        slot.sequence = None
        if self._backlog:
            backlog = self._backlog.popleft()
            slot.sequence = backlog.sequence
            slot.queue.extend(backlog.items)
            if not backlog.ended:
                del self._backlogged[backlog.sequence]
                self._bound[backlog.sequence] = slot
            return True
        heapq.heappush(self._ready, (slot.index, slot.instance))
        return False
