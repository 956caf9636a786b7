"""The sequences a load sends to a stateful model (one with `sequence_batching`), as
perf_analyzer runs them.

A load keeps a number of live sequences, each in a slot: one per concurrent request in
concurrency mode, `--num-of-sequences` in request-rate mode. A slot's sequence has an id from
`--sequence-id-range start[:end]` (end excluded; ids wrap within the range, skipping ids
other slots hold), flags `sequence_start` on its first request and `sequence_end` on its last,
and a length of `--sequence-length` +/- `--sequence-length-variation` percent (drawn
uniformly, at least 1). With input data files, a new sequence takes the next data stream
(round robin) and runs its steps in order; its length is the stream's step count unless
`--sequence-length` is given (the steps then repeat). When the load stops, every sequence
still open gets one last request with `sequence_end`, so the server frees its slots.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from analyzer.errors import AnalyzerError

DEFAULT_SEQUENCE_LENGTH = 20
DEFAULT_LENGTH_VARIATION_PCT = 20.0
DEFAULT_NUM_OF_SEQUENCES = 4


@dataclass(frozen=True, slots=True)
class SequenceOptions:
    """perf_analyzer's sequence flags."""

    length: int = DEFAULT_SEQUENCE_LENGTH  # --sequence-length
    length_given: bool = False  # whether --sequence-length was given (it overrides data steps)
    variation_pct: float = DEFAULT_LENGTH_VARIATION_PCT  # --sequence-length-variation
    id_start: int = 1  # --sequence-id-range start
    id_end: int | None = None  # --sequence-id-range end (excluded); None: no bound
    num_of_sequences: int = DEFAULT_NUM_OF_SEQUENCES  # request-rate mode's live sequences
    serial: bool = False  # --serial-sequences: one request at a time per sequence

    @property
    def id_span(self) -> int | None:
        return None if self.id_end is None else self.id_end - self.id_start


def check_sequence_options(options: SequenceOptions) -> None:
    """AnalyzerError naming the flag whose value cannot be used."""
    if options.length < 1:
        raise AnalyzerError(f"--sequence-length must be at least 1, got {options.length}")
    if options.variation_pct < 0:
        raise AnalyzerError(
            f"--sequence-length-variation cannot be negative, got {options.variation_pct:g}"
        )
    if options.id_start < 1:
        raise AnalyzerError(
            f"--sequence-id-range: the start must be at least 1 (id 0 means no sequence to"
            f" the server), got {options.id_start}"
        )
    if options.id_end is not None and options.id_end <= options.id_start:
        raise AnalyzerError(
            f"--sequence-id-range: the end ({options.id_end}, excluded) must be above the"
            f" start ({options.id_start})"
        )
    if options.num_of_sequences < 1:
        raise AnalyzerError(
            f"--num-of-sequences must be at least 1, got {options.num_of_sequences}"
        )


def parse_sequence_id_range(text: str) -> tuple[int, int | None]:
    """`--sequence-id-range start[:end]` -> (start, end or None)."""
    start_text, colon, end_text = text.partition(":")
    try:
        start = int(start_text)
        end = int(end_text) if colon else None
    except ValueError:
        raise AnalyzerError(
            f"--sequence-id-range '{text}': expected start[:end] in whole numbers (e.g. 1:1000)"
        ) from None
    return start, end


def check_live_sequences(options: SequenceOptions, live: int, what: str) -> None:
    """perf_analyzer refuses a load with more live sequences than the id range has ids."""
    span = options.id_span
    if span is not None and live > span:
        raise AnalyzerError(
            f"{what} keeps {live} sequences live but --sequence-id-range"
            f" {options.id_start}:{options.id_end} has only {span} ids"
        )


@dataclass(frozen=True, slots=True)
class SequenceStep:
    """What one request of a sequence carries: its id and flags, and its input data
    (stream and step within the stream)."""

    sequence_id: int
    start: bool
    end: bool
    stream: int
    step: int


@dataclass(slots=True)
class SequenceSlot:
    """One live sequence. `remaining` is 0 when no sequence is open in the slot."""

    index: int
    sequence_id: int = 0
    remaining: int = 0
    stream: int = 0
    position: int = 0  # requests sent in the current sequence
    outstanding: int = 0  # requests of this slot sent and not yet answered

    @property
    def busy(self) -> bool:
        return self.outstanding > 0


class SequenceSchedule:
    """Hands out each slot's next request: ids, flags, lengths and data steps."""

    def __init__(
        self, options: SequenceOptions, stream_steps: list[int], data_given: bool, seed: int = 0
    ) -> None:
        check_sequence_options(options)
        if not stream_steps or min(stream_steps) < 1:
            raise ValueError("every data stream needs at least one step")
        self._options = options
        self._stream_steps = stream_steps
        self._data_given = data_given
        self._rng = random.Random(seed)
        self._next_stream = 0
        self._counter = 0  # ids handed out so far (the next candidate's offset)
        self._held: set[int] = set()
        self.slots: list[SequenceSlot] = []

    def ensure_slots(self, count: int) -> None:
        """Have at least `count` slots (new ones start with no sequence open)."""
        while len(self.slots) < count:
            self.slots.append(SequenceSlot(index=len(self.slots)))

    def next_step(self, slot: SequenceSlot) -> SequenceStep:
        """The slot's next request, opening a new sequence when none is open."""
        if slot.remaining == 0:
            self._open(slot)
        start = slot.position == 0
        step = SequenceStep(
            sequence_id=slot.sequence_id,
            start=start,
            end=slot.remaining == 1,
            stream=slot.stream,
            step=slot.position % self._stream_steps[slot.stream],
        )
        slot.position += 1
        slot.remaining -= 1
        return step

    def closing_step(self, slot: SequenceSlot) -> SequenceStep | None:
        """A last request (`end` set) for a sequence still open, else None."""
        if slot.remaining == 0:
            return None
        slot.remaining = 1
        return self.next_step(slot)

    def random_length(self) -> int:
        """perf_analyzer's: the base length plus a uniform offset of up to +/- variation%,
        truncated toward zero; at least 1."""
        base = self._options.length
        offset = int((2.0 * self._rng.random() - 1.0) * self._options.variation_pct / 100 * base)
        return max(1, base + offset)

    def _open(self, slot: SequenceSlot) -> None:
        new_id = self._take_id(fallback=slot.sequence_id)
        if slot.sequence_id and slot.sequence_id != new_id:
            self._held.discard(slot.sequence_id)
        slot.sequence_id = new_id
        slot.stream = self._next_stream
        self._next_stream = (self._next_stream + 1) % len(self._stream_steps)
        if self._data_given and not self._options.length_given:
            slot.remaining = self._stream_steps[slot.stream]
        else:
            slot.remaining = self.random_length()
        slot.position = 0

    def _take_id(self, fallback: int) -> int:
        """The next id of the range that no other slot holds; when every id is held (a
        range as small as the live sequences), the slot keeps its own."""
        options = self._options
        span = options.id_span
        tries = span if span is not None else 1 + len(self._held)
        for _ in range(tries):
            offset = self._counter % span if span is not None else self._counter
            self._counter += 1
            candidate = options.id_start + offset
            if candidate not in self._held:
                self._held.add(candidate)
                return candidate
        if fallback:
            return fallback
        raise AnalyzerError(
            f"--sequence-id-range {options.id_start}:{options.id_end}: no sequence id left"
        )
