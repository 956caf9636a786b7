"""SlotTable: which sequence holds which (instance, slot), and the backlog (pure bookkeeping)."""

from __future__ import annotations

import pytest

from serve.errors import ErrorKind, ServeError
from serve.scheduler.sequence_request import SequenceFlags
from serve.scheduler.sequence_slots import SlotTable


def flags(sequence: int | str, start: bool = False, end: bool = False) -> SequenceFlags:
    return SequenceFlags(sequence, start, end)


def test_free_slots_go_lowest_index_first_spreading_over_instances() -> None:
    table: SlotTable[str] = SlotTable("m", instances=2, slots_per_instance=2)
    placed = [table.route(flags(n, start=True), f"r{n}") for n in (1, 2, 3, 4)]
    assert [(s.instance, s.index) for s in placed if s] == [(0, 0), (1, 0), (0, 1), (1, 1)]
    assert [list(s.queue) for s in placed if s] == [["r1"], ["r2"], ["r3"], ["r4"]]


def test_a_sequence_keeps_its_slot_until_its_end() -> None:
    table: SlotTable[str] = SlotTable("m", instances=1, slots_per_instance=2)
    first = table.route(flags("a", start=True), "a0")
    assert first is not None
    assert table.route(flags("b", start=True), "b0") is not first
    assert table.route(flags("a"), "a1") is first
    assert table.route(flags("a", end=True), "a2") is first
    assert list(first.queue) == ["a0", "a1", "a2"]
    with pytest.raises(ServeError) as caught:
        table.route(flags("a"), "a3")  # ended: unknown again
    assert caught.value.kind is ErrorKind.INVALID_ARGUMENT


def test_unknown_sequence_without_start_is_refused_as_triton_words_it() -> None:
    table: SlotTable[str] = SlotTable("acc", instances=1, slots_per_instance=1)
    with pytest.raises(ServeError) as caught:
        table.route(flags(42), "x")
    assert caught.value.message == (
        "inference request for sequence 42 to model 'acc' must specify the START flag on the "
        "first request of the sequence"
    )


def test_full_slots_backlog_new_sequences_and_a_released_slot_takes_the_oldest() -> None:
    table: SlotTable[str] = SlotTable("m", instances=1, slots_per_instance=1)
    slot = table.route(flags(1, start=True), "s1")
    assert slot is not None
    slot.queue.popleft()
    assert table.route(flags(2, start=True), "s2a") is None
    assert table.route(flags(3, start=True, end=True), "s3") is None
    assert table.route(flags(2), "s2b") is None  # joins its own backlog queue
    assert table.backlog_size == 3
    assert table.route(flags(1, end=True), "s1-end") is slot
    slot.queue.popleft()
    assert table.release(slot) is True
    assert list(slot.queue) == ["s2a", "s2b"] and slot.sequence == 2
    assert table.route(flags(2, end=True), "s2c") is slot  # now bound, no longer backlogged
    slot.queue.clear()
    assert table.release(slot) is True  # the single-request sequence 3
    assert list(slot.queue) == ["s3"]
    assert not table.known(3)  # it ended in the backlog
    slot.queue.clear()
    assert table.release(slot) is False  # free again
    assert table.route(flags(9, start=True), "s9") is slot


def test_forgetting_an_idle_sequence_unbinds_it_and_marks_its_slot() -> None:
    table: SlotTable[str] = SlotTable("m", instances=1, slots_per_instance=1)
    slot = table.route(flags("idle", start=True), "r")
    assert table.forget("idle") is slot and slot is not None and slot.reap
    assert not table.known("idle")
    assert table.forget("idle") is None
    slot.queue.clear()
    assert table.release(slot) is False and not slot.reap
