"""Decoupled python models below the server: the response sender's rules, the Streamed message
between stub and server, and a batch's responses reaching each request (a real stub)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from serve.backends.base import BatchTimes
from serve.backends.python import pb_utils
from serve.backends.python.protocol import ResponseMsg, Streamed, TensorMeta, decode, encode
from serve.errors import ErrorKind, ServeError
from serve.inference import InferRequest
from tests.unit.serve.backends.test_python_backend import make_instance

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def _response(value: int) -> pb_utils.InferenceResponse:
    tensor = pb_utils.Tensor("OUT", np.array([value], dtype=np.int32))
    return pb_utils.InferenceResponse(output_tensors=[tensor])


def test_sender_emits_until_the_final_flag_then_refuses() -> None:
    sent: list[tuple[pb_utils.InferenceResponse | None, int]] = []
    sender = pb_utils.InferenceResponseSender(
        lambda response, flags: sent.append((response, flags))
    )
    first, last = _response(1), _response(2)
    sender.send(first)
    sender.send(last, flags=FINAL)
    assert sent == [(first, 0), (last, FINAL)]
    with pytest.raises(pb_utils.TritonModelException, match="Response sender has been closed"):
        sender.send(_response(3))
    with pytest.raises(pb_utils.TritonModelException, match="closed"):
        sender.send(flags=FINAL)
    assert len(sent) == 2
    assert not sender.close()  # already closed by the final flag


def test_sender_needs_a_response_unless_final() -> None:
    sent: list[tuple[pb_utils.InferenceResponse | None, int]] = []
    sender = pb_utils.InferenceResponseSender(
        lambda response, flags: sent.append((response, flags))
    )
    with pytest.raises(pb_utils.TritonModelException, match="must be provided"):
        sender.send()
    with pytest.raises(pb_utils.TritonModelException, match="InferenceResponse"):
        sender.send("text", flags=FINAL)  # type: ignore[arg-type]
    sender.send(flags=FINAL)
    assert sent == [(None, FINAL)]


def test_a_sender_closed_by_a_failed_execute_refuses() -> None:
    sender = pb_utils.InferenceResponseSender(lambda response, flags: None)
    assert sender.close()
    with pytest.raises(pb_utils.TritonModelException):
        sender.send(_response(1))


def test_a_request_the_model_made_has_no_sender() -> None:
    request = pb_utils.InferenceRequest(model_name="m")
    with pytest.raises(pb_utils.TritonModelException, match="no reference to the decoupled"):
        request.get_response_sender()


def test_streamed_round_trips() -> None:
    array = np.arange(3, dtype=np.int32)
    message = Streamed(2, ResponseMsg([TensorMeta("OUT", "<i4", (3,), -1, array)]), 0)
    back = decode(encode(message))
    assert isinstance(back, Streamed) and back.slot == 2 and back.flags == 0
    assert back.response is not None
    (meta,) = back.response.outputs
    assert meta.name == "OUT" and meta.offset == -1 and meta.data is not None
    np.testing.assert_array_equal(meta.data, array)
    bare = decode(encode(Streamed(0, None, FINAL)))
    assert bare == Streamed(0, None, FINAL)
    failed = decode(encode(Streamed(1, ResponseMsg([], "bad", 3), FINAL)))
    assert failed.response == ResponseMsg([], "bad", 3)


BATCHED_CONFIG = """
backend: "python"
max_batch_size: 4
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

# Round-robin over the batch: step s goes to every request with IN > s; IN < 0 ends its request
# with an error response.
ROUND_ROBIN_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


class TritonPythonModel:
    def execute(self, requests):
        senders = [request.get_response_sender() for request in requests]
        counts = [
            int(pb_utils.get_input_tensor_by_name(r, "IN").as_numpy().reshape(-1)[0])
            for r in requests
        ]
        for step in range(max(counts)):
            for sender, n in zip(senders, counts):
                if step < n:
                    out = pb_utils.Tensor("OUT", np.array([[step]], dtype=np.int32))
                    sender.send(pb_utils.InferenceResponse(output_tensors=[out]))
        for sender, n in zip(senders, counts):
            if n < 0:
                error = pb_utils.TritonError("negative IN", pb_utils.TritonError.INVALID_ARG)
                sender.send(pb_utils.InferenceResponse(error=error), flags=FINAL)
            else:
                sender.send(flags=FINAL)
        return None
"""


def _collect(into: list[tuple[Any, bool]]) -> Callable[[Any, bool], None]:
    return lambda result, final: into.append((result, final))


def test_a_batch_streams_each_requests_responses_to_it(tmp_path: Path) -> None:
    instance = make_instance(tmp_path, ROUND_ROBIN_MODEL, BATCHED_CONFIG, name="round_robin")
    instance.load()
    try:
        seen: dict[int, list[tuple[Any, bool]]] = {0: [], 1: [], 2: []}
        requests = [
            InferRequest(
                "round_robin",
                "1",
                {"IN": np.array([[n]], dtype=np.int32)},
                on_response=_collect(seen[i]),
            )
            for i, n in enumerate([3, 1, -1])
        ]
        results = instance.execute(requests, BatchTimes())
    finally:
        instance.unload()
    assert results[:2] == [{}, {}]
    assert isinstance(results[2], ServeError) and results[2].kind is ErrorKind.INVALID_ARGUMENT
    assert [int(r["OUT"][0, 0]) for r, _ in seen[0][:3]] == [0, 1, 2]
    assert [final for _, final in seen[0]] == [False, False, False, True]
    assert seen[0][3] == (None, True)
    assert [int(r["OUT"][0, 0]) for r, _ in seen[1][:1]] == [0]
    assert seen[1][1] == (None, True)
    ((error, final),) = seen[2]
    assert final and isinstance(error, ServeError) and "negative IN" in error.message
