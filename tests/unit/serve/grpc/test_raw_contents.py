"""raw_input_contents taken out of a ModelInferRequest's wire bytes as views of them."""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf.message import DecodeError
from tritonclient.grpc import service_pb2 as pb

from serve.grpc.codec import decode_infer_request
from serve.grpc.raw_contents import SCAN_MIN, parse_infer_request


def _request(raw: list[bytes]) -> pb.ModelInferRequest:
    message = pb.ModelInferRequest(model_name="m", model_version="1", id="x")
    message.parameters["p"].int64_param = 3
    for index, data in enumerate(raw):
        message.inputs.add(name=f"IN{index}", datatype="FP32", shape=[len(data) // 4])
    message.outputs.add(name="OUT")
    message.raw_input_contents.extend(raw)
    return message


def test_large_raw_contents_are_views_of_the_received_buffer() -> None:
    images = [np.arange(SCAN_MIN, dtype=np.float32), np.ones(7, np.float32)]
    original = _request([a.tobytes() for a in images])
    received = bytearray(original.SerializeToString())
    request, raw = parse_infer_request(memoryview(received))
    assert raw is not None and [bytes(r) for r in raw] == [a.tobytes() for a in images]
    assert not request.raw_input_contents
    without = pb.ModelInferRequest.FromString(original.SerializeToString())
    without.ClearField("raw_input_contents")
    assert request == without
    decoded = decode_infer_request(request, raw)
    assert np.shares_memory(decoded.inputs["IN0"], np.frombuffer(received, np.uint8))
    assert not decoded.inputs["IN0"].flags.writeable
    np.testing.assert_array_equal(decoded.inputs["IN0"], images[0])
    np.testing.assert_array_equal(decoded.inputs["IN1"], images[1])


def test_a_small_message_is_parsed_whole() -> None:
    request, raw = parse_infer_request(_request([b"\x00" * 8]).SerializeToString())
    assert raw is None and list(request.raw_input_contents) == [b"\x00" * 8]


@pytest.mark.parametrize("cut", [1, 2, 5000])
def test_a_truncated_message_is_a_decode_error(cut: int) -> None:
    wire = _request([b"\x01" * (SCAN_MIN + 100)]).SerializeToString()
    with pytest.raises(DecodeError):
        parse_infer_request(wire[:-cut])
