"""ModelStreamInfer: many requests on one stream, each answered with its own id; a bad request
gets its error in the stream and the stream goes on."""

from __future__ import annotations

import asyncio
import queue
from collections.abc import AsyncIterator, Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from tritonclient.utils import InferenceServerException

from tests.support.server_process import RunningServer

Answer = tuple[grpcclient.InferResult | None, InferenceServerException | None]


def _simple_inputs(value: int, module: object = grpcclient) -> list[grpcclient.InferInput]:
    a = np.full((1, 16), value, dtype=np.int32)
    b = np.ones((1, 16), dtype=np.int32)
    inputs = []
    for name, array in (("INPUT0", a), ("INPUT1", b)):
        tensor = module.InferInput(name, [1, 16], "INT32")  # type: ignore[attr-defined]
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


@pytest.fixture
def client(server: RunningServer) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        yield client


def _collect(answers: queue.Queue[Answer], count: int) -> list[Answer]:
    return [answers.get(timeout=60) for _ in range(count)]


def test_many_requests_on_one_stream_get_their_own_ids(
    client: grpcclient.InferenceServerClient,
) -> None:
    answers: queue.Queue[Answer] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        for k in range(40):
            client.async_stream_infer("simple", _simple_inputs(k), request_id=f"r{k}")
        got = _collect(answers, 40)
    finally:
        client.stop_stream()
    sums: dict[str, int] = {}
    for result, error in got:
        assert error is None and result is not None
        sums[result.get_response().id] = int(result.as_numpy("OUTPUT0")[0, 0])
    assert sums == {f"r{k}": k + 1 for k in range(40)}


def test_a_bad_request_answers_in_the_stream_and_the_stream_goes_on(
    client: grpcclient.InferenceServerClient,
) -> None:
    answers: queue.Queue[Answer] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        for k in range(5):
            client.async_stream_infer("simple", _simple_inputs(k), request_id=f"ok{k}")
        client.async_stream_infer("simple", _simple_inputs(0)[:1], request_id="missing-input")
        client.async_stream_infer("no_such_model", _simple_inputs(0), request_id="no-model")
        for k in range(5, 10):
            client.async_stream_infer("simple", _simple_inputs(k), request_id=f"ok{k}")
        got = _collect(answers, 12)
    finally:
        client.stop_stream()
    errors = [str(error) for _, error in got if error is not None]
    assert len(errors) == 2
    assert sum("missing input 'INPUT1'" in e for e in errors) == 1
    assert sum("no_such_model" in e for e in errors) == 1
    ids = {result.get_response().id for result, _ in got if result is not None}
    assert ids == {f"ok{k}" for k in range(10)}


def test_asyncio_stream_answers_every_request(server: RunningServer) -> None:
    async def run() -> dict[str, int]:
        async def requests() -> AsyncIterator[dict[str, object]]:
            for k in range(12):
                yield {
                    "model_name": "simple" if k != 6 else "no_such_model",
                    "inputs": _simple_inputs(k, aioclient),
                    "request_id": str(k),
                }

        sums: dict[str, int] = {}
        async with aioclient.InferenceServerClient(server.grpc_url) as client:
            async for result, error in client.stream_infer(requests()):
                if error is not None:
                    sums["error"] = 1
                else:
                    sums[result.get_response().id] = int(result.as_numpy("OUTPUT0")[0, 0])
        return sums

    sums = asyncio.run(asyncio.wait_for(run(), 60))
    assert sums == {"error": 1} | {str(k): k + 1 for k in range(12) if k != 6}
