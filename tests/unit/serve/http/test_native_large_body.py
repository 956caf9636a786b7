"""Large HTTP bodies read in place: once the headers announce a body of at least
`DIRECT_BODY_MIN` bytes, the connection offers the socket that body's own buffer, decoded
tensors are views of it, and large binary answers leave as their arrays' bytes."""

from __future__ import annotations

import numpy as np
import orjson

from serve.http.codec import decode_infer_request, encode_infer_response_parts
from serve.http.native.protocol import DIRECT_BODY_MIN, HttpConnection
from serve.inference import InferRequest, InferResponse, OutputTensor
from tests.unit.serve.http.test_native_protocol import FakeTransport, Handler, get, parse


def _post(body: bytes, *headers: str) -> bytes:
    lines = ["POST /v2/models/m/infer HTTP/1.1", "Host: x", f"Content-Length: {len(body)}"]
    return ("\r\n".join([*lines, *headers]) + "\r\n\r\n").encode() + body


def _connection() -> tuple[HttpConnection, FakeTransport, Handler]:
    handler = Handler()
    connection = HttpConnection(handler)
    transport = FakeTransport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    return connection, transport, handler


def test_the_socket_reads_a_large_body_straight_into_its_buffer() -> None:
    connection, transport, handler = _connection()
    body = np.random.default_rng(0).integers(0, 256, DIRECT_BODY_MIN + 5000, np.uint8).tobytes()
    request = _post(body)
    head = len(request) - len(body)
    connection.data_received(request[: head + 1000])
    buffer = connection.get_buffer(-1)
    assert len(buffer) == len(body) - 1000  # the rest of the body, and nothing after it
    buffer[:] = body[1000:]
    connection.buffer_updated(len(buffer))
    (received,) = handler.requests
    assert isinstance(received.body, memoryview) and received.body.obj is buffer.obj
    assert bytes(received.body) == body
    # the next request on the connection is read as usual
    connection.data_received(get("/after"))
    assert [r.target for r in handler.requests] == [b"/v2/models/m/infer", b"/after"]
    handler.answer(0, b"first")
    handler.answer(1)
    assert [r.body for r in parse(transport.written)] == [b"first", b"/after"]


def test_a_small_or_chunked_body_is_read_as_before() -> None:
    connection, _, handler = _connection()
    connection.data_received(_post(b"x" * 100))
    chunked = b"".join(b"%x\r\n" % 40000 + b"y" * 40000 + b"\r\n" for _ in range(2)) + b"0\r\n\r\n"
    connection.data_received(
        b"POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked
    )
    assert [r.body for r in handler.requests] == [b"x" * 100, b"y" * 80000]
    assert all(type(r.body) is bytes for r in handler.requests)


def test_tensors_decoded_from_a_body_read_in_place_are_read_only_views_of_it() -> None:
    image = np.arange(3 * 64 * 64, dtype=np.float32).reshape(1, 3, 64, 64)
    header = orjson.dumps(
        {
            "inputs": [
                {
                    "name": "IMAGE",
                    "datatype": "FP32",
                    "shape": list(image.shape),
                    "parameters": {"binary_data_size": image.nbytes},
                }
            ]
        }
    )
    buffer = bytearray(header + image.tobytes())
    request = decode_infer_request(memoryview(buffer), len(header), "m", "1")
    decoded = request.inputs["IMAGE"]
    np.testing.assert_array_equal(decoded, image)
    assert np.shares_memory(decoded, np.frombuffer(buffer, np.uint8))
    assert not decoded.flags.writeable


def test_a_binary_output_is_sent_from_its_array() -> None:
    scores = np.arange(100_000, dtype=np.float32)
    request = InferRequest(
        model_name="m",
        model_version="1",
        inputs={},
        input_datatypes={},
        parameters={"binary_data_output": True},
    )
    response = InferResponse(
        model_name="m", model_version="1", outputs=[OutputTensor("S", "FP32", scores)]
    )
    parts, header_length = encode_infer_response_parts(response, request)
    assert header_length == len(parts[0])
    assert np.shares_memory(np.frombuffer(parts[1], np.float32), scores)
