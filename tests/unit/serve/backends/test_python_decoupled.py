"""The pure pieces of decoupled python models: the response sender's rules and the Streamed
message on the wire between stub and server."""

from __future__ import annotations

import numpy as np
import pytest

from serve.backends.python import pb_utils
from serve.backends.python.protocol import ResponseMsg, Streamed, TensorMeta, decode, encode

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


def test_request_sender_only_for_decoupled_models() -> None:
    request = pb_utils.InferenceRequest(model_name="m")
    with pytest.raises(pb_utils.TritonModelException, match="decoupled"):
        request.get_response_sender()


def test_streamed_round_trips() -> None:
    array = np.arange(3, dtype=np.int32)
    message = Streamed(2, ResponseMsg([TensorMeta("OUT", "<i4", (3,), -1, array)]), 0)
    back = decode(encode(message))
    assert isinstance(back, Streamed) and back.position == 2 and back.flags == 0
    assert back.response is not None
    (meta,) = back.response.outputs
    assert meta.name == "OUT" and meta.offset == -1 and meta.data is not None
    np.testing.assert_array_equal(meta.data, array)
    bare = decode(encode(Streamed(0, None, FINAL)))
    assert bare == Streamed(0, None, FINAL)
    failed = decode(encode(Streamed(1, ResponseMsg([], "bad", 3), FINAL)))
    assert failed.response == ResponseMsg([], "bad", 3)
