"""Sending a sequence model's load: which slot each request belongs to, and its bytes.

`SequenceSource` is what the factory builds once: a framer (each data step framed once
without parameters; a send adds the step's sequence id and flags, see
`protocol.client.infer_params`) and what the schedule needs. `SequenceSender` is the driver's
per-load state: in concurrency mode a request goes to the slot that has waited longest for
its previous answer, so each sequence has at most one request outstanding and its requests
follow one another; in request-rate mode each send picks one of `--num-of-sequences` slots at
random (seeded), or, with `--serial-sequences`, one without a request outstanding.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass
from typing import Protocol

from analyzer.load.sequences import (
    SequenceOptions,
    SequenceSchedule,
    SequenceSlot,
    SequenceStep,
    check_live_sequences,
)
from protocol.client.http import Endpoint, build_infer_request
from protocol.client.infer_params import (
    grpc_parameters_suffix,
    json_header_with_parameters,
    sequence_parameters,
)


class StepFramer(Protocol):
    """Frames one step of a data stream as the transport's request bytes (no sequence
    parameters: a send adds them)."""

    def frame(self, step: SequenceStep) -> bytes: ...


@dataclass(frozen=True, slots=True)
class HttpStepFramer:
    """HTTP requests: per stream and step, the JSON header and the binary tensors after it
    (empty for an all-JSON body)."""

    endpoint: Endpoint
    model: str
    version: str
    headers: dict[str, str]
    payloads: tuple[tuple[tuple[bytes, bytes], ...], ...]  # [stream][step] = (header, tail)

    def frame(self, step: SequenceStep) -> bytes:
        header, tail = self.payloads[step.stream][step.step]
        parameters = sequence_parameters(step.sequence_id, step.start, step.end)
        header = json_header_with_parameters(header, parameters)
        return build_infer_request(
            self.endpoint,
            self.model,
            self.version,
            header + tail,
            len(header) if tail else None,
            self.headers,
        )


@dataclass(frozen=True, slots=True)
class GrpcStepFramer:
    """Serialized ModelInferRequests per stream and step."""

    requests: tuple[tuple[bytes, ...], ...]

    def frame(self, step: SequenceStep) -> bytes:
        parameters = sequence_parameters(step.sequence_id, step.start, step.end)
        return self.requests[step.stream][step.step] + grpc_parameters_suffix(parameters)


@dataclass(frozen=True, slots=True)
class SequenceSource:
    """What the factory builds once for a sequence model and every driver's
    `SequenceSender` shares: the framer, and how many steps each data stream has."""

    framer: StepFramer
    stream_steps: tuple[int, ...]  # steps of each data stream
    data_given: bool  # the streams come from input data files
    options: SequenceOptions


class SequenceSender:
    """Slot bookkeeping for one driver. Connections carry one request at a time, so the
    slot of an outstanding request is found by its connection."""

    def __init__(self, source: SequenceSource, seed: int = 0) -> None:
        self._source = source
        self.schedule = SequenceSchedule(
            source.options, list(source.stream_steps), source.data_given, seed
        )
        self._rng = random.Random(seed + 1)
        self._ready: deque[SequenceSlot] = deque()  # concurrency mode, longest waiting first
        self._outstanding: dict[int, SequenceSlot] = {}  # id(connection) -> slot
        self._rate_mode = False

    def use_concurrency(self, concurrency: int) -> None:
        check_live_sequences(self._source.options, concurrency, f"concurrency {concurrency}")
        self._rate_mode = False
        self.schedule.ensure_slots(concurrency)
        self._ready = deque(slot for slot in self.schedule.slots if not slot.busy)

    def use_rate(self) -> None:
        count = self._source.options.num_of_sequences
        check_live_sequences(self._source.options, count, f"--num-of-sequences {count}")
        self._rate_mode = True
        self.schedule.ensure_slots(self._source.options.num_of_sequences)
        self._ready.clear()  # request-rate mode picks at random

    def can_send(self) -> bool:
        """Whether a slot can take a request now (False only with --serial-sequences in
        request-rate mode, or with every slot outstanding)."""
        if not self._rate_mode:
            return bool(self._ready)
        if not self._source.options.serial:
            return True
        return any(not slot.busy for slot in self.schedule.slots)

    def take(self, connection: object) -> bytes:
        """The next request, for sending on `connection`."""
        slot = self._pick()
        return self._frame(connection, slot, self.schedule.next_step(slot))

    def done(self, connection: object) -> SequenceSlot:
        """The slot whose request `connection` has just finished."""
        slot = self._outstanding.pop(id(connection))
        slot.outstanding -= 1
        if not self._rate_mode and not slot.busy:
            self._ready.append(slot)
        return slot

    def closing(self, connection: object, slot: SequenceSlot) -> bytes | None:
        """The last request (sequence_end) of the slot's open sequence, if one is open."""
        step = self.schedule.closing_step(slot)
        if step is None:
            return None
        if slot in self._ready:  # only when stopping: the cost of the search does not matter
            self._ready.remove(slot)
        return self._frame(connection, slot, step)

    def open_idle_slots(self) -> list[SequenceSlot]:
        """Slots with a sequence open and no request outstanding (to close when stopping)."""
        return [s for s in self.schedule.slots if s.remaining and not s.busy]

    def _pick(self) -> SequenceSlot:
        slots = self.schedule.slots
        if self._rate_mode:
            if not self._source.options.serial:
                return slots[self._rng.randrange(len(slots))]
            free = [slot for slot in slots if not slot.busy]
            return free[self._rng.randrange(len(free))]
        return self._ready.popleft()

    def _frame(self, connection: object, slot: SequenceSlot, step: SequenceStep) -> bytes:
        slot.outstanding += 1
        self._outstanding[id(connection)] = slot
        return self._source.framer.frame(step)
