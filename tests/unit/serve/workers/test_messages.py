"""Requests and answers as they cross between a front end and the core."""

from __future__ import annotations

import pickle

import numpy as np

from serve.errors import ServeError
from serve.inference import (
    Cancellation,
    InferRequest,
    InferResponse,
    OutputTensor,
    RegionSlice,
    RequestedOutput,
)
from serve.workers.arena import ArenaReader, TensorArena
from serve.workers.messages import answer_from, answer_message, request_from, request_message


def _travel(message: object) -> object:
    return pickle.loads(pickle.dumps(message))


def test_a_request_arrives_whole_without_its_callbacks() -> None:
    arena = TensorArena()
    try:
        request = InferRequest(
            "simple",
            "1",
            {"INPUT0": np.arange(16, dtype=np.int32).reshape(1, 16)},
            {"INPUT0": "INT32"},
            [RequestedOutput("OUTPUT0", {"binary_data": True})],
            id="r1",
            parameters={"priority": 2, "sequence_id": 7},
            cancellation=Cancellation(),
            on_stats=lambda *_: None,
        )
        message = request_message(3, request, arena, stream=True, endpoint="ModelInfer RPC")
        arrived = request_from(_travel(message), ArenaReader())  # type: ignore[arg-type]
        assert (arrived.model_name, arrived.model_version, arrived.id) == ("simple", "1", "r1")
        assert arrived.parameters == {"priority": 2, "sequence_id": 7}
        assert arrived.requested_outputs == [RequestedOutput("OUTPUT0", {"binary_data": True})]
        assert arrived.arrival_ns == request.arrival_ns  # one clock for every process
        assert arrived.inputs["INPUT0"].tolist() == request.inputs["INPUT0"].tolist()
        assert arrived.cancellation is None and arrived.on_stats is None
        assert request.cancellation is not None  # the front end's own request is left alone
    finally:
        arena.close()


def test_an_answer_carries_outputs_errors_and_region_outputs() -> None:
    arena = TensorArena()
    try:
        region = RegionSlice("out_region", 0, 64)
        response = InferResponse(
            "simple",
            "1",
            [
                OutputTensor("OUTPUT0", "INT32", np.arange(16, dtype=np.int32)),
                OutputTensor("OUTPUT1", "INT32", np.ones((4, 4), np.int32), region=region),
            ],
            id="r1",
            parameters={"triton_final_response": True},
        )
        message = _travel(answer_message(5, response, arena, final=True))
        result = answer_from(message, ArenaReader())  # type: ignore[arg-type]
        assert isinstance(result, InferResponse)
        assert result.outputs[0].data.tolist() == list(range(16))
        assert result.outputs[1].region == region and result.outputs[1].shape == (4, 4)
        assert result.parameters == {"triton_final_response": True}
        arena.free(message.block)  # type: ignore[attr-defined]
        assert arena.in_use() == 0

        error = _travel(answer_message(6, ServeError.not_found("no model 'x'"), arena, True))
        failed = answer_from(error, ArenaReader())  # type: ignore[arg-type]
        assert isinstance(failed, ServeError)
        assert (failed.kind, failed.message) == (ServeError.not_found("").kind, "no model 'x'")
    finally:
        arena.close()
