"""Large gRPC messages: DATA payloads reach their call as they arrive (the connection keeps no
more than an incomplete frame header between reads), and each message is gathered once into a
buffer that the method gets as it is."""

from __future__ import annotations

import struct

import numpy as np

from serve.grpc.http2 import frames as f
from serve.grpc.http2.calls import LARGE_MESSAGE
from tests.unit.serve.grpc.http2.test_connection import ECHO, LATER, STREAM, Client, messages


def _body(payload: bytes) -> bytes:
    return b"\x00" + struct.pack(">I", len(payload)) + payload


def test_a_large_data_frame_read_in_pieces_is_not_kept_by_the_connection() -> None:
    client = Client(max_message_bytes=1 << 22)
    client.frames()
    payload = np.random.default_rng(0).integers(0, 256, 600_000, np.uint8).tobytes()
    data = client.headers(1, LATER) + f.frame(f.DATA, f.END_STREAM, 1, _body(payload))
    kept = []
    for start in range(0, len(data), 16_384):
        client.send(data[start : start + 16_384])
        kept.append(len(client.connection._buffer))
    assert max(kept) < f.FRAME_HEADER_BYTES
    ((message, call),) = client.later
    assert isinstance(message, memoryview) and len(message) == len(payload)
    assert bytes(message) == payload
    call.respond(b"ok")
    assert list(messages(client.frames(), 1)) == [b"ok"]


def test_messages_split_anywhere_arrive_whole_and_in_order() -> None:
    client = Client(max_message_bytes=1 << 22)
    client.frames()
    large = bytes(range(256)) * (LARGE_MESSAGE // 256 + 3)
    stream = b"".join(_body(m) for m in (b"a", large, b"", b"bc"))
    client.send(client.headers(1, STREAM))
    for start in range(0, len(stream), 7_001):
        piece = stream[start : start + 7_001]
        client.send(f.frame(f.DATA, 0, 1, piece))
    (listener,) = client.listeners
    assert [bytes(m) for m in listener.messages] == [b"a", large, b"", b"bc"]
    assert [type(m) for m in listener.messages] == [bytes, memoryview, bytes, bytes]


def test_a_stream_ending_inside_a_large_message_is_an_error() -> None:
    client = Client(max_message_bytes=1 << 22)
    client.frames()
    data = client.headers(1, ECHO) + f.frame(f.DATA, 0, 1, _body(b"x" * 100_000)[:70_000])
    client.send(data[:40_000])
    client.send(data[40_000:])
    client.send(f.frame(f.DATA, f.END_STREAM, 1, b""))
    (answer,) = client.frames()
    assert client.decode(answer)["grpc-status"] == "13"


def test_an_answer_given_as_buffers_is_written_without_joining_them() -> None:
    client = Client(
        settings={f.SETTINGS_INITIAL_WINDOW_SIZE: 1 << 20, f.SETTINGS_MAX_FRAME_SIZE: 1 << 20}
    )
    client.send(f.window_update(0, 1 << 20))
    client.frames()
    client.send(client.headers(1, LATER) + client.message(b"question", 1))
    ((_, call),) = client.later
    scores = memoryview(np.arange(50_000, dtype=np.float32).tobytes())
    call.respond([b"head", scores, b"tail"])
    assert client.transport.writes_of_parts == 1
    assert list(messages(client.frames(), 1)) == [b"head" + bytes(scores) + b"tail"]
