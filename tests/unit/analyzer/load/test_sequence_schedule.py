"""The sequence schedule: ids (range, wrap, no id two live sequences share), START/END
flags, lengths with their variation, data streams, and the slot choice of each load mode."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from analyzer.errors import AnalyzerError
from analyzer.load.sequence_requests import HttpStepFramer, SequenceSender, SequenceSource
from analyzer.load.sequences import (
    SequenceOptions,
    SequenceSchedule,
    SequenceStep,
    check_live_sequences,
    check_sequence_options,
    parse_sequence_id_range,
)


def run_sequence(schedule: SequenceSchedule, slot_index: int = 0) -> list[SequenceStep]:
    """The steps of the slot's next whole sequence."""
    slot = schedule.slots[slot_index]
    steps = [schedule.next_step(slot)]
    while not steps[-1].end:
        assert len(steps) < 1000, "the sequence never ends"
        steps.append(schedule.next_step(slot))
    return steps


def fixed(length: int = 3, **kwargs: object) -> SequenceOptions:
    return SequenceOptions(length=length, variation_pct=0.0, **kwargs)  # type: ignore[arg-type]


def test_a_sequence_starts_once_ends_once_and_keeps_its_id() -> None:
    schedule = SequenceSchedule(fixed(4), [1], data_given=False)
    schedule.ensure_slots(1)
    steps = run_sequence(schedule)
    assert [(s.start, s.end) for s in steps] == [
        (True, False),
        (False, False),
        (False, False),
        (False, True),
    ]
    assert {s.sequence_id for s in steps} == {1}
    assert run_sequence(schedule)[0].sequence_id == 2  # the next sequence takes a new id


def test_a_one_request_sequence_is_both_start_and_end() -> None:
    schedule = SequenceSchedule(fixed(1), [1], data_given=False)
    schedule.ensure_slots(1)
    assert [(s.start, s.end) for s in run_sequence(schedule)] == [(True, True)]


def test_ids_wrap_within_the_range_and_skip_ids_live_sequences_hold() -> None:
    schedule = SequenceSchedule(fixed(2, id_start=5, id_end=8), [1], data_given=False)
    schedule.ensure_slots(2)
    first = schedule.next_step(schedule.slots[0])  # slot 0 holds 5
    assert first.sequence_id == 5
    ids = [run_sequence(schedule, 1)[0].sequence_id for _ in range(5)]
    # Slot 1 cycles through the range's other ids (8 is excluded, 5 is held by slot 0).
    assert ids == [6, 7, 6, 7, 6]


def test_unbounded_ids_keep_counting() -> None:
    schedule = SequenceSchedule(fixed(1, id_start=100), [1], data_given=False)
    schedule.ensure_slots(1)
    assert [run_sequence(schedule)[0].sequence_id for _ in range(3)] == [100, 101, 102]


def test_a_range_as_small_as_the_slots_lets_a_slot_keep_its_id() -> None:
    schedule = SequenceSchedule(fixed(1, id_start=1, id_end=3), [1], data_given=False)
    schedule.ensure_slots(2)
    assert run_sequence(schedule, 0)[0].sequence_id == 1
    assert run_sequence(schedule, 1)[0].sequence_id == 2
    assert run_sequence(schedule, 0)[0].sequence_id == 1  # 2 is held: it keeps its own


def test_lengths_vary_within_the_variation_and_reach_both_sides() -> None:
    schedule = SequenceSchedule(SequenceOptions(length=20, variation_pct=20.0), [1], False, 7)
    lengths = [schedule.random_length() for _ in range(2000)]
    assert min(lengths) >= 16 and max(lengths) <= 24
    assert min(lengths) < 18 and max(lengths) > 22  # not stuck at the base length
    schedule.ensure_slots(1)
    assert 16 <= len(run_sequence(schedule)) <= 24


def test_a_length_never_drops_below_one() -> None:
    schedule = SequenceSchedule(SequenceOptions(length=1, variation_pct=300.0), [1], False, 3)
    assert min(schedule.random_length() for _ in range(500)) == 1


def test_data_streams_give_their_step_counts_round_robin_in_order() -> None:
    schedule = SequenceSchedule(fixed(20), [3, 2], data_given=True)
    schedule.ensure_slots(1)
    first, second, third = (run_sequence(schedule) for _ in range(3))
    assert [(s.stream, s.step) for s in first] == [(0, 0), (0, 1), (0, 2)]
    assert [(s.stream, s.step) for s in second] == [(1, 0), (1, 1)]
    assert [(s.stream, s.step) for s in third] == [(0, 0), (0, 1), (0, 2)]


def test_a_given_sequence_length_repeats_the_stream_steps() -> None:
    schedule = SequenceSchedule(fixed(5, length_given=True), [2], data_given=True)
    schedule.ensure_slots(1)
    assert [s.step for s in run_sequence(schedule)] == [0, 1, 0, 1, 0]


def test_closing_step_ends_an_open_sequence_and_nothing_else() -> None:
    schedule = SequenceSchedule(fixed(10), [1], data_given=False)
    schedule.ensure_slots(1)
    slot = schedule.slots[0]
    assert schedule.closing_step(slot) is None  # nothing open yet
    opened = schedule.next_step(slot)
    closing = schedule.closing_step(slot)
    assert closing is not None and closing.end and not closing.start
    assert closing.sequence_id == opened.sequence_id
    assert schedule.closing_step(slot) is None


@pytest.mark.parametrize(
    ("options", "flag"),
    [
        (SequenceOptions(length=0), "--sequence-length"),
        (SequenceOptions(variation_pct=-1), "--sequence-length-variation"),
        (SequenceOptions(id_start=0), "--sequence-id-range"),
        (SequenceOptions(id_start=5, id_end=5), "--sequence-id-range"),
        (SequenceOptions(num_of_sequences=0), "--num-of-sequences"),
    ],
)
def test_bad_options_name_their_flag(options: SequenceOptions, flag: str) -> None:
    with pytest.raises(AnalyzerError, match=flag):
        check_sequence_options(options)


def test_id_range_parsing_and_live_sequence_limit() -> None:
    assert parse_sequence_id_range("3") == (3, None)
    assert parse_sequence_id_range("3:10") == (3, 10)
    with pytest.raises(AnalyzerError, match="start\\[:end\\]"):
        parse_sequence_id_range("a:b")
    check_live_sequences(SequenceOptions(id_start=1, id_end=5), 4, "concurrency 4")
    with pytest.raises(AnalyzerError, match="concurrency 5 keeps 5 sequences live"):
        check_live_sequences(SequenceOptions(id_start=1, id_end=5), 5, "concurrency 5")


class RecordingFramer:
    def __init__(self) -> None:
        self.steps: list[SequenceStep] = []

    def frame(self, step: SequenceStep) -> bytes:
        self.steps.append(step)
        return b"request"


def sender(options: SequenceOptions) -> tuple[SequenceSender, RecordingFramer]:
    framer = RecordingFramer()
    source = SequenceSource(framer, (1,), False, options)
    return SequenceSender(source, seed=1), framer


def test_concurrency_mode_keeps_one_request_per_sequence_outstanding() -> None:
    seq, framer = sender(fixed(3))
    seq.use_concurrency(2)
    connections = [object(), object()]
    for connection in connections:
        seq.take(connection)
    assert not seq.can_send()  # both sequences have a request outstanding
    for _ in range(10):  # answer and replace, as the driver does
        for connection in connections:
            seq.done(connection)
            seq.take(connection)
    by_id: dict[int, list[SequenceStep]] = {}
    for step in framer.steps:
        by_id.setdefault(step.sequence_id, []).append(step)
    assert len(by_id) > 2  # sequences ended and new ones began
    for steps in by_id.values():
        # each sequence in order: START first, END last (if it got there)
        assert steps[0].start and not any(s.start for s in steps[1:])
        assert not any(s.end for s in steps[:-1])


def test_serial_request_rate_mode_waits_for_a_free_sequence() -> None:
    seq, _ = sender(fixed(5, num_of_sequences=2, serial=True))
    seq.use_rate()
    a, b = object(), object()
    seq.take(a)
    assert seq.can_send()
    seq.take(b)
    assert not seq.can_send()
    slot = seq.done(a)
    assert seq.can_send() and not slot.busy


def test_request_rate_mode_spreads_sends_over_the_sequences() -> None:
    seq, framer = sender(fixed(1000, num_of_sequences=4))
    seq.use_rate()
    for index in range(200):
        seq.take(index)  # no answers: without --serial-sequences sends never wait
    assert seq.can_send()
    assert {s.sequence_id for s in framer.steps} == {1, 2, 3, 4}


def test_stopping_closes_every_open_sequence_once() -> None:
    seq, framer = sender(fixed(10))
    seq.use_concurrency(3)
    for index in range(3):
        seq.take(index)
    slot = seq.done(0)
    closing = seq.closing(0, slot)
    assert closing is not None and framer.steps[-1].end
    assert seq.closing(0, seq.done(0)) is None  # its end was the last request
    assert [s.index for s in seq.open_idle_slots()] == []  # 1 and 2 are still outstanding


def test_http_framing_adds_the_parameters_and_fixes_both_lengths() -> None:
    from protocol.client.http import Endpoint

    framer = HttpStepFramer(
        Endpoint("127.0.0.1", 8000), "acc", "", {}, (((b'{"id":"","inputs":[]}', b"\x01\x02"),),)
    )
    request = framer.frame(SequenceStep(sequence_id=9, start=True, end=False, stream=0, step=0))
    head, _, body = request.partition(b"\r\n\r\n")
    headers = dict(line.split(": ", 1) for line in head.decode().split("\r\n")[1:])
    length = int(headers["Inference-Header-Content-Length"])
    assert int(headers["Content-Length"]) == len(body) and body[length:] == b"\x01\x02"
    assert orjson.loads(body[:length])["parameters"] == {
        "sequence_id": 9,
        "sequence_start": True,
        "sequence_end": False,
    }


def test_json_data_streams_keep_their_steps(tmp_path: Path) -> None:
    from analyzer.input_files import read_json_streams
    from analyzer.load.options import ModelInfo, TensorInfo

    model = ModelInfo("acc", "1", 0, [TensorInfo("INPUT", "INT32", [1])], [], {})
    path = tmp_path / "data.json"
    path.write_text('{"data": [[{"INPUT": [1]}, {"INPUT": [2]}], [{"INPUT": [3]}]]}')
    streams = read_json_streams(path, model, {"INPUT": (1,)})
    assert [[int(s["INPUT"][0]) for s in stream] for stream in streams] == [[1, 2], [3]]
    path.write_text('{"data": [{"INPUT": [1]}, {"INPUT": [2]}]}')  # objects: one stream
    streams = read_json_streams(path, model, {"INPUT": (1,)})
    assert [[int(s["INPUT"][0]) for s in stream] for stream in streams] == [[1, 2]]
