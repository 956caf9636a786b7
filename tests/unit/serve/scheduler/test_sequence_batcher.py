"""The sequence batcher driven through a fake instance on real InstanceWorkers.

The fake records every batch row it gets (control inputs, state, input) and holds each batch
until the test lets it go (a semaphore), so the order of events is set by the test, not by
timing. It answers OUT = STATE_IN + IN and STATE_OUT = OUT, so a state routed to the wrong
sequence shows in the sums. Waits are bounded; nothing asserts durations.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from serve.backends.base import BatchTimes, InstanceContext, ModelInstance, RequestResult
from serve.errors import ErrorKind, ServeError
from serve.inference import InferRequest
from serve.scheduler.instance_worker import InstanceWorker
from serve.scheduler.sequence_batcher import SequenceBatcher
from serve.scheduler.sequence_inputs import SequenceInputs
from serve.scheduler.statistics import ModelStatistics

WAIT_S = 5.0

CONTROLS = """
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END bool_false_true: [ false, true ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY fp32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
  state [ {
    input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_FP32 dims: [ 1 ]
    initial_state { name: "start" data_type: TYPE_FP32 dims: [ 1 ] zero_data: true }
  } ]
"""


def model_config(max_batch_size: int, strategy: str, idle_us: int = 0) -> mc.ModelConfig:
    text = f"""
        name: "fake" backend: "fake" max_batch_size: {max_batch_size}
        input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }} ]
        output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] }} ]
        sequence_batching {{
          max_sequence_idle_microseconds: {idle_us}
          {strategy}
          {CONTROLS}
        }}
    """
    return text_format.Parse(text, mc.ModelConfig())


@dataclass(frozen=True)
class Row:
    ready: float
    start: int
    end: bool
    corrid: int
    value: float
    state: float


class FakeInstance(ModelInstance):
    def __init__(self, context: InstanceContext, batches: list[list[Row]]) -> None:
        super().__init__(context)
        self.permits = threading.Semaphore(0)
        self.held = True
        self._batches = batches

    def load(self) -> None:
        pass

    def execute(self, requests: Sequence[InferRequest], times: BatchTimes) -> list[RequestResult]:
        def one(r: InferRequest, name: str) -> float:
            return float(r.inputs[name].reshape(-1)[0])

        rows = [
            Row(
                one(r, "READY"),
                int(one(r, "START")),
                bool(one(r, "END")),
                int(one(r, "CORRID")),
                one(r, "IN"),
                one(r, "STATE_IN"),
            )
            for r in requests
        ]
        self._batches.append(rows)
        if self.held:
            assert self.permits.acquire(timeout=WAIT_S), "the test never let the batch go"
        results: list[RequestResult] = []
        for request in requests:
            total = request.inputs["STATE_IN"] + request.inputs["IN"]
            results.append({"OUT": total, "STATE_OUT": total})
        return results


class Harness:
    def __init__(self, config: mc.ModelConfig, instances: int = 1) -> None:
        loop = asyncio.get_running_loop()
        self.batches: list[list[Row]] = []
        self.instances: list[FakeInstance] = []
        workers = []
        for index in range(instances):
            context = InstanceContext(
                model_name="fake",
                model_version=1,
                repository_path=Path("."),
                model_dir=Path("."),
                model_path=Path("model"),
                config=config,
                instance_name=f"fake_{index}",
                instance_index=index,
            )
            instance = FakeInstance(context, self.batches)
            self.instances.append(instance)
            workers.append(InstanceWorker(instance, loop))
        self.stats = ModelStatistics("fake", "1")
        inputs = SequenceInputs(config, Path("."))
        self.batcher = SequenceBatcher(config, inputs, workers, self.stats, loop)

    def send(
        self, sequence: int | str, value: float, start: bool = False, end: bool = False
    ) -> asyncio.Future[RequestResult]:
        future: asyncio.Future[RequestResult] = asyncio.get_running_loop().create_future()
        parameters: dict[str, object] = {"sequence_start": start, "sequence_end": end}
        if sequence != 0:
            parameters["sequence_id"] = sequence
        request = InferRequest(
            "fake", "", {"IN": np.array([[value]], dtype=np.float32)}, parameters=parameters
        )
        self.batcher.enqueue(request, future.set_result)
        return future

    def release(self, count: int = 1, instance: int = 0) -> None:
        for _ in range(count):
            self.instances[instance].permits.release()

    def run_freely(self) -> None:
        for instance in self.instances:
            instance.held = False
            instance.permits.release()

    async def batches_seen(self, count: int) -> None:
        deadline = time.monotonic() + WAIT_S
        while len(self.batches) < count:
            assert time.monotonic() < deadline, f"only {len(self.batches)} batches ran"
            await asyncio.sleep(0.001)


async def value_of(future: asyncio.Future[RequestResult]) -> float:
    result = await asyncio.wait_for(future, WAIT_S)
    assert not isinstance(result, ServeError), result
    return float(result["OUT"].reshape(-1)[0])


def test_direct_keeps_each_sequence_in_its_row_and_fills_empty_slots_not_ready() -> None:
    async def body() -> None:
        h = Harness(model_config(4, "direct { }"))
        a0 = h.send(7, 1, start=True)
        await h.batches_seen(1)  # [a0] runs (held): later requests queue in their slots
        b0 = h.send(8, 10, start=True)
        a1 = h.send(7, 2, end=True)
        h.release()
        await h.batches_seen(2)
        h.release()
        assert await value_of(a0) == 1
        assert await value_of(a1) == 3
        assert await value_of(b0) == 10
        b1 = h.send(8, 20)
        await h.batches_seen(3)
        h.release()
        assert await value_of(b1) == 30
        await h.batcher.close()
        first, second, third = h.batches
        assert first == [Row(1, 1, False, 7, 1, 0)]
        assert second == [Row(1, 0, True, 7, 2, 1), Row(1, 1, False, 8, 10, 0)]
        # Sequence 7 ended and freed slot 0: it is a not-ready row, sequence 8 keeps row 1.
        assert third == [Row(0, 0, False, 0, 0, 0), Row(1, 0, False, 8, 20, 10)]

    asyncio.run(body())


def test_oldest_batches_at_most_one_request_per_sequence() -> None:
    async def body() -> None:
        h = Harness(model_config(4, "oldest { max_candidate_sequences: 4 }"))
        first = h.send(1, 1, start=True)
        await h.batches_seen(1)
        futures = [h.send(1, 2), h.send(1, 3, end=True), h.send(2, 5, start=True)]
        futures.append(h.send(3, 7, start=True, end=True))
        h.run_freely()
        assert await value_of(first) == 1
        assert [await value_of(f) for f in futures] == [3, 6, 5, 7]
        await h.batcher.close()
        for batch in h.batches:
            ids = [row.corrid for row in batch]
            assert len(ids) == len(set(ids)), h.batches
            assert all(row.ready == 1 for row in batch)
        assert [row.corrid for row in h.batches[1]] == [2, 3]  # batched; 1 waits for its turn

    asyncio.run(body())


@pytest.mark.parametrize("strategy", ["direct { }", "oldest { }"])
def test_more_sequences_than_slots_wait_in_the_backlog_and_all_sum_correctly(
    strategy: str,
) -> None:
    async def body() -> None:
        h = Harness(model_config(2, strategy), instances=2)  # 4 slots for 10 sequences
        h.run_freely()
        futures = {}
        for step in range(3):
            for sequence in range(1, 11):
                futures[sequence, step] = h.send(
                    sequence, sequence * 10 + step, start=step == 0, end=step == 2
                )
        for (sequence, step), future in futures.items():
            expected = sum(sequence * 10 + k for k in range(step + 1))
            assert await value_of(future) == expected, (sequence, step)
        await h.batcher.close()
        assert h.stats.success.count == 30

    asyncio.run(body())


def test_a_new_start_resets_the_state() -> None:
    async def body() -> None:
        h = Harness(model_config(1, "direct { }"))
        h.run_freely()
        assert await value_of(h.send(5, 4, start=True)) == 4
        assert await value_of(h.send(5, 4)) == 8
        assert await value_of(h.send(5, 1, start=True)) == 1
        await h.batcher.close()

    asyncio.run(body())


def test_an_idle_sequence_loses_its_slot() -> None:
    async def body() -> None:
        h = Harness(model_config(1, "direct { }", idle_us=1000))
        h.run_freely()
        assert await value_of(h.send(3, 1, start=True)) == 1
        deadline = time.monotonic() + WAIT_S
        while True:  # until the reaper has freed it (1 ms idle)
            result = await asyncio.wait_for(h.send(3, 1), WAIT_S)
            if isinstance(result, ServeError):
                break
            assert time.monotonic() < deadline, "the idle sequence was never freed"
            await asyncio.sleep(0.01)
        assert "must specify the START flag" in result.message
        assert await value_of(h.send(3, 2, start=True)) == 2  # a new START gets a slot
        await h.batcher.close()

    asyncio.run(body())


@pytest.mark.parametrize(
    ("sequence", "parameters", "message"),
    [
        (0, {}, "must specify a non-zero or non-empty correlation ID"),
        ("abc", {}, "is a string but model 'fake' takes the correlation ID in its UINT64"),
        (4, {"sequence_start": "yes"}, "'sequence_start' for model 'fake' must be a boolean"),
        (-1, {}, "must be an unsigned 64-bit integer"),
    ],
)
def test_bad_sequence_parameters_are_invalid_arguments(
    sequence: int | str, parameters: dict[str, object], message: str
) -> None:
    async def body() -> None:
        h = Harness(model_config(2, "direct { }"))
        future: asyncio.Future[RequestResult] = asyncio.get_running_loop().create_future()
        params: dict[str, object] = {"sequence_start": True, **parameters}
        if sequence != 0:
            params["sequence_id"] = sequence
        request = InferRequest("fake", "", {"IN": np.zeros((1, 1), np.float32)}, parameters=params)
        h.batcher.enqueue(request, future.set_result)
        result = await asyncio.wait_for(future, WAIT_S)
        assert isinstance(result, ServeError) and result.kind is ErrorKind.INVALID_ARGUMENT
        assert message in result.message
        await h.batcher.close()

    asyncio.run(body())


def test_a_request_of_batch_size_two_is_refused() -> None:
    async def body() -> None:
        h = Harness(model_config(2, "direct { }"))
        future: asyncio.Future[RequestResult] = asyncio.get_running_loop().create_future()
        request = InferRequest(
            "fake",
            "",
            {"IN": np.zeros((2, 1), np.float32)},
            parameters={"sequence_id": 1, "sequence_start": True},
        )
        h.batcher.enqueue(request, future.set_result)
        result = await asyncio.wait_for(future, WAIT_S)
        assert isinstance(result, ServeError)
        assert result.message == (
            "inference request to model 'fake' must specify batch-size 1 due to requirements "
            "of sequence batcher"
        )
        await h.batcher.close()

    asyncio.run(body())
