"""Iterative sequences (`sequence_batching { iterative_sequence: true }`) in the sequence
batcher, driven through a fake instance on real InstanceWorkers.

The fake counts the executions of each request (correlation id and request id) and answers
`Rescheduled()` until a request has run IN times, then OUT = that count; it records what each
execution saw (not-ready rows, correlation id 0, aside). Waits are bounded; nothing asserts
durations.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from serve.backends.base import (
    BatchTimes,
    InstanceContext,
    ModelInstance,
    RequestResult,
    Rescheduled,
)
from serve.errors import ErrorKind, ServeError
from serve.inference import InferRequest
from serve.scheduler.instance_worker import InstanceWorker
from serve.scheduler.sequence_batcher import SequenceBatcher
from serve.scheduler.sequence_inputs import SequenceInputs
from serve.scheduler.statistics import ModelStatistics

WAIT_S = 5.0
NOT_CONFIGURED = (
    "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not "
    "configured to handle such a flag."
)


def model_config(max_batch_size: int, batching: str) -> mc.ModelConfig:
    text = f"""
        name: "fake" backend: "fake" max_batch_size: {max_batch_size}
        input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }} ]
        output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] }} ]
        sequence_batching {{
          {batching}
          control_input [
            {{ name: "START" control [ {{ kind: CONTROL_SEQUENCE_START
                                          int32_false_true: [ 0, 1 ] }} ] }},
            {{ name: "CORRID" control [ {{ kind: CONTROL_SEQUENCE_CORRID
                                           data_type: TYPE_UINT64 }} ] }}
          ]
        }}
    """
    return text_format.Parse(text, mc.ModelConfig())


@dataclass(frozen=True)
class Seen:
    corrid: int
    start: int
    parameters: tuple[object, object, object]  # sequence_id, sequence_start, sequence_end
    request_id: str


class CountingInstance(ModelInstance):
    def __init__(self, context: InstanceContext, seen: list[list[Seen]]) -> None:
        super().__init__(context)
        self._seen = seen
        self._counts: dict[tuple[int, str], int] = {}

    def load(self) -> None:
        pass

    def execute(self, requests: Sequence[InferRequest], times: BatchTimes) -> list[RequestResult]:
        batch = []
        results: list[RequestResult] = []
        for request in requests:
            corrid = int(request.inputs["CORRID"].reshape(-1)[0])
            if corrid == 0:  # a not-ready row of the direct strategy
                results.append({})
                continue
            params = request.parameters
            keys = ("sequence_id", "sequence_start", "sequence_end")
            batch.append(
                Seen(
                    corrid,
                    int(request.inputs["START"].reshape(-1)[0]),
                    (params.get(keys[0]), params.get(keys[1]), params.get(keys[2])),
                    request.id,
                )
            )
            count = self._counts.pop((corrid, request.id), 0) + 1
            if count < float(request.inputs["IN"].reshape(-1)[0]):
                self._counts[corrid, request.id] = count
                results.append(Rescheduled())
            else:
                results.append({"OUT": np.array([[count]], dtype=np.float32)})
        self._seen.append(batch)
        return results


class Harness:
    def __init__(self, config: mc.ModelConfig, instances: int = 1) -> None:
        loop = asyncio.get_running_loop()
        self.seen: list[list[Seen]] = []
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
            workers.append(InstanceWorker(CountingInstance(context, self.seen), loop))
        self.stats = ModelStatistics("fake", "1")
        inputs = SequenceInputs(config, Path("."))
        self.batcher = SequenceBatcher(config, inputs, workers, self.stats, loop)

    def send(
        self, count: int, request_id: str, **parameters: object
    ) -> asyncio.Future[RequestResult]:
        future: asyncio.Future[RequestResult] = asyncio.get_running_loop().create_future()
        inputs = {"IN": np.array([[count]], dtype=np.float32)}
        request = InferRequest("fake", "", inputs, id=request_id, parameters=dict(parameters))
        self.batcher.enqueue(request, future.set_result)
        return future


async def answer(future: asyncio.Future[RequestResult]) -> RequestResult:
    return await asyncio.wait_for(future, WAIT_S)


async def count_of(future: asyncio.Future[RequestResult]) -> int:
    result = await answer(future)
    assert not isinstance(result, ServeError), result
    return int(result["OUT"].reshape(-1)[0])


@pytest.mark.parametrize("strategy", ["direct { }", "oldest { }"])
def test_each_request_runs_again_until_answered_with_its_own_id(strategy: str) -> None:
    async def body() -> None:
        # 2 instances x 2 slots for 7 requests: the later ones wait in the backlog.
        h = Harness(model_config(2, f"iterative_sequence: true {strategy}"), instances=2)
        counts = {f"r{n}": n for n in (1, 2, 3, 4, 5, 6, 7)}
        futures = {rid: h.send(n, rid) for rid, n in counts.items()}
        for rid, n in counts.items():
            assert await count_of(futures[rid]) == n, rid
        await h.batcher.close()
        runs = [seen for batch in h.seen for seen in batch]
        assert len(runs) == sum(counts.values())
        by_request: dict[str, list[Seen]] = {}
        for seen in runs:
            by_request.setdefault(seen.request_id, []).append(seen)
        corrids = {runs[0].corrid for runs in by_request.values()}
        assert len(corrids) == len(counts) and 0 not in corrids
        for rid, n in counts.items():
            mine = by_request[rid]
            corrid = mine[0].corrid
            assert [(s.corrid, s.start) for s in mine] == [(corrid, 1)] + [(corrid, 0)] * (n - 1)
            assert [s.parameters for s in mine] == [(corrid, True, False)] + [
                (corrid, False, False)
            ] * (n - 1)
        # Each request is counted once, when answered; every execution is an inference.
        assert h.stats.success.count == len(counts)
        assert h.stats.fail.count == 0
        assert h.stats.inference_count == len(runs)
        assert h.batcher.queued == 0

    asyncio.run(body())


def test_a_client_sequence_id_ends_with_its_request() -> None:
    async def body() -> None:
        h = Harness(model_config(0, "iterative_sequence: true"))
        first = h.send(3, "a", sequence_id=77, sequence_start=True, sequence_end=True)
        assert await count_of(first) == 3
        assert [(s.corrid, s.start, s.parameters) for b in h.seen for s in b] == [
            (77, 1, (77, True, True)),
            (77, 0, (77, False, False)),
            (77, 0, (77, False, False)),
        ]
        # Its sequence ended when the request was answered: one more needs START.
        refused = await answer(h.send(1, "b", sequence_id=77))
        assert isinstance(refused, ServeError) and "must specify the START flag" in str(refused)
        # The single slot is free again for a sequence of the server's own numbering.
        assert await count_of(h.send(2, "c")) == 2
        await h.batcher.close()

    asyncio.run(body())


@pytest.mark.parametrize("strategy", ["direct { }", "oldest { }"])
def test_a_start_repeated_with_a_live_id_shares_its_slot_until_both_are_answered(
    strategy: str,
) -> None:
    async def body() -> None:
        h = Harness(model_config(0, f"iterative_sequence: true {strategy}"))  # one slot
        first = h.send(2, "a", sequence_id=9, sequence_start=True)
        second = h.send(3, "b", sequence_id=9, sequence_start=True)
        waiting = h.send(2, "c")  # in the backlog until the slot frees
        assert [await count_of(f) for f in (first, second, waiting)] == [2, 3, 2]
        assert {s.corrid for b in h.seen for s in b if s.request_id in "ab"} == {9}
        # The slot went to the backlogged request only once both with id 9 were answered.
        order = [s.request_id for b in h.seen for s in b]
        assert order.index("c") > max(i for i, rid in enumerate(order) if rid in "ab"), order
        refused = await answer(h.send(1, "d", sequence_id=9))
        assert isinstance(refused, ServeError) and "must specify the START flag" in str(refused)
        assert await count_of(h.send(1, "e")) == 1
        await h.batcher.close()

    asyncio.run(body())


@pytest.mark.parametrize("strategy", ["direct { }", "oldest { }"])
def test_without_iterative_sequence_a_rescheduled_request_gets_tritons_error(
    strategy: str,
) -> None:
    async def body() -> None:
        h = Harness(model_config(2, strategy))
        failed = await answer(h.send(2, "x", sequence_id=5, sequence_start=True))
        assert type(failed) is ServeError
        assert failed.kind is ErrorKind.INVALID_ARGUMENT
        assert failed.message == NOT_CONFIGURED
        assert await count_of(h.send(1, "y", sequence_id=5, sequence_end=True)) == 1
        await h.batcher.close()
        assert (h.stats.success.count, h.stats.fail.count) == (1, 1)

    asyncio.run(body())
