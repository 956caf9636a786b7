"""The HTTP/2 gRPC connection against a scripted client: frames in, frames out."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

import hpack
import pytest

from serve.grpc.http2 import connection as connection_module
from serve.grpc.http2 import frames as f
from serve.grpc.http2.calls import Call, RpcMethod
from serve.grpc.http2.connection import GrpcConnection

ECHO = b"/test.Service/Echo"
STREAM = b"/test.Service/Stream"
LATER = b"/test.Service/Later"


@dataclass
class Frame:
    type: int
    flags: int
    stream: int
    payload: bytes


class FakeTransport:
    def __init__(self) -> None:
        self.written = bytearray()
        self.writes_of_parts = 0
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written += data

    def writelines(self, parts: list[bytes | memoryview]) -> None:
        self.writes_of_parts += 1
        for part in parts:
            self.written += part

    def close(self) -> None:
        self.closed = True


@dataclass
class Listener:
    call: Call
    messages: list[bytes | memoryview] = field(default_factory=list)
    cancelled: bool = False

    def on_message(self, message: bytes | memoryview) -> None:
        self.messages.append(message)
        self.call.send_message(b"re:" + message)

    def on_half_close(self) -> None:
        self.call.finish(0)

    def on_cancel(self) -> None:
        self.cancelled = True


class Client:
    """A scripted HTTP/2 client over one connection with a fake transport."""

    def __init__(
        self,
        max_message_bytes: int = 1 << 20,
        settings: dict[int, int] | None = None,
        max_streams: int = 1024,
        refusal: str = "",
    ):
        self.listeners: list[Listener] = []
        self.later: list[tuple[bytes | memoryview, Call]] = []
        self.connection = GrpcConnection(
            self.route, max_message_bytes, max_streams=max_streams, refusal=refusal
        )
        self.transport = FakeTransport()
        self.connection.connection_made(self.transport)  # type: ignore[arg-type]
        self.encoder = hpack.Encoder()
        self.decoder = hpack.Decoder()
        self.read = 0
        self.send(f.PREFACE + f.settings_frame(settings or {}))

    def route(self, path: bytes) -> RpcMethod | None:
        if path == ECHO:
            return RpcMethod(unary=lambda message, call: call.respond(message[::-1]))
        if path == LATER:
            return RpcMethod(unary=lambda message, call: self.later.append((message, call)))
        if path == STREAM:

            def open_stream(call: Call) -> Listener:
                self.listeners.append(Listener(call))
                return self.listeners[-1]

            return RpcMethod(open_stream=open_stream)
        return None

    def send(self, data: bytes) -> None:
        self.connection.data_received(data)

    def headers(self, stream: int, path: bytes, end_stream: bool = False) -> bytes:
        block = self.encoder.encode(
            [
                (":method", "POST"),
                (":scheme", "http"),
                (":path", path.decode()),
                (":authority", "test"),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
            ]
        )
        flags = f.END_HEADERS | (f.END_STREAM if end_stream else 0)
        return f.frame(f.HEADERS, flags, stream, block)

    @staticmethod
    def message(payload: bytes, stream: int, end_stream: bool = True) -> bytes:
        body = b"\x00" + struct.pack(">I", len(payload)) + payload
        return f.frame(f.DATA, f.END_STREAM if end_stream else 0, stream, body)

    def frames(self) -> list[Frame]:
        """Frames written since the last call."""
        data = bytes(self.transport.written[self.read :])
        out = []
        position = 0
        while position + 9 <= len(data):
            length = int.from_bytes(data[position : position + 3], "big")
            end = position + 9 + length
            assert end <= len(data), "a frame was cut"
            stream = int.from_bytes(data[position + 5 : position + 9], "big")
            out.append(
                Frame(data[position + 3], data[position + 4], stream, data[position + 9 : end])
            )
            position = end
        assert position == len(data)
        self.read += position
        return out

    def decode(self, frame: Frame) -> dict[str, str]:
        return {k.decode(): v.decode() for k, v in self.decoder.decode(frame.payload, raw=True)}


def messages(frames: list[Frame], stream: int) -> Iterator[bytes]:
    body = b"".join(fr.payload for fr in frames if fr.type == f.DATA and fr.stream == stream)
    while body:
        length = struct.unpack(">I", body[1:5])[0]
        yield body[5 : 5 + length]
        body = body[5 + length :]


def test_server_opens_with_settings_and_acknowledges_the_clients() -> None:
    client = Client()
    frames = client.frames()
    assert frames[0].type == f.SETTINGS and not frames[0].flags & f.ACK
    assert any(fr.type == f.SETTINGS and fr.flags & f.ACK for fr in frames)


def test_unary_call_answers_headers_message_and_ok_trailers() -> None:
    client = Client()
    client.frames()
    client.send(client.headers(1, ECHO) + client.message(b"hello", 1))
    frames = client.frames()
    assert [fr.type for fr in frames] == [f.HEADERS, f.DATA, f.HEADERS]
    assert client.decode(frames[0]) == {":status": "200", "content-type": "application/grpc"}
    assert list(messages(frames, 1)) == [b"olleh"]
    assert frames[2].flags & f.END_STREAM
    assert client.decode(frames[2]) == {"grpc-status": "0"}


def test_unknown_method_is_unimplemented_and_the_connection_goes_on() -> None:
    client = Client()
    client.frames()
    client.send(client.headers(1, b"/test.Service/Nope") + client.message(b"x", 1))
    (answer,) = client.frames()
    trailers = client.decode(answer)
    assert trailers["grpc-status"] == "12"
    assert "/test.Service/Nope" in trailers["grpc-message"]
    client.send(client.headers(3, ECHO) + client.message(b"ab", 3))
    assert list(messages(client.frames(), 3)) == [b"ba"]


def test_message_over_the_limit_is_resource_exhausted() -> None:
    client = Client(max_message_bytes=10)
    client.frames()
    client.send(client.headers(1, ECHO) + client.message(b"x" * 11, 1))
    frames = client.frames()
    assert client.decode(frames[0])["grpc-status"] == "8"


def test_message_split_over_frames_and_padding() -> None:
    client = Client()
    client.frames()
    body = b"\x00" + struct.pack(">I", 6) + b"abcdef"
    padded = bytes([3]) + body[4:] + b"\x00\x00\x00"
    client.send(
        client.headers(1, ECHO)
        + f.frame(f.DATA, 0, 1, body[:4])
        + f.frame(f.DATA, f.END_STREAM | f.PADDED, 1, padded)
    )
    assert list(messages(client.frames(), 1)) == [b"fedcba"]


def test_header_block_in_continuation_frames() -> None:
    client = Client()
    client.frames()
    block = client.headers(1, ECHO)[9:]
    client.send(
        f.frame(f.HEADERS, 0, 1, block[:5])
        + f.frame(f.CONTINUATION, f.END_HEADERS, 1, block[5:])
        + client.message(b"xy", 1)
    )
    assert list(messages(client.frames(), 1)) == [b"yx"]


def test_answer_waits_for_the_peer_window_and_respects_its_frame_size() -> None:
    client = Client(settings={f.SETTINGS_INITIAL_WINDOW_SIZE: 10})
    client.frames()
    client.send(client.headers(1, ECHO) + client.message(b"0123456789abcdef" * 2000, 1))
    first = client.frames()
    data = [fr for fr in first if fr.type == f.DATA]
    assert sum(len(fr.payload) for fr in data) == 10  # the stream's window
    assert not any(fr.type == f.HEADERS and fr.flags & f.END_STREAM for fr in first)
    client.send(f.window_update(1, 1_000_000))
    rest = client.frames()
    assert all(len(fr.payload) <= f.DEFAULT_MAX_FRAME for fr in rest)
    (answer,) = messages(first + rest, 1)
    assert answer == (b"0123456789abcdef" * 2000)[::-1]
    assert rest[-1].type == f.HEADERS and rest[-1].flags & f.END_STREAM


def test_settings_ack_goes_out_before_data_sized_by_the_new_settings() -> None:
    """A peer enforces a larger frame size only once its SETTINGS are acknowledged: an answer
    sent while the same read is handled must not use the new size before the ACK."""
    client = Client()
    client.frames()
    client.send(
        f.settings_frame({f.SETTINGS_MAX_FRAME_SIZE: 1 << 20})
        + client.headers(1, ECHO)
        + client.message(b"y" * 100_000, 1)
    )
    frames = client.frames()
    ack = next(i for i, fr in enumerate(frames) if fr.type == f.SETTINGS and fr.flags & f.ACK)
    first_data = next(i for i, fr in enumerate(frames) if fr.type == f.DATA)
    assert ack < first_data
    assert max(len(fr.payload) for fr in frames if fr.type == f.DATA) > f.DEFAULT_MAX_FRAME


def test_bidirectional_stream_answers_each_message_and_ends_with_ok() -> None:
    client = Client()
    client.frames()
    client.send(client.headers(1, STREAM))
    for word in (b"a", b"b", b"c"):
        client.send(client.message(word, 1, end_stream=False))
    client.send(f.frame(f.DATA, f.END_STREAM, 1))
    frames = client.frames()
    assert list(messages(frames, 1)) == [b"re:a", b"re:b", b"re:c"]
    assert client.decode(frames[-1]) == {"grpc-status": "0"}


def test_reset_stream_cancels_its_listener_and_later_answers_are_dropped() -> None:
    client = Client()
    client.frames()
    client.send(client.headers(1, STREAM) + client.message(b"a", 1, end_stream=False))
    client.send(f.rst_stream(1, f.CANCEL))
    client.frames()
    assert client.listeners[0].cancelled
    client.listeners[0].call.send_message(b"late")
    assert client.frames() == []


def test_ping_is_acknowledged_with_its_payload() -> None:
    client = Client()
    client.frames()
    client.send(f.frame(f.PING, 0, 0, b"12345678"))
    (pong,) = client.frames()
    assert pong.type == f.PING and pong.flags & f.ACK and pong.payload == b"12345678"


def test_bad_preface_is_answered_with_goaway_and_close() -> None:
    connection = GrpcConnection(lambda path: None, 1024)
    transport = FakeTransport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    connection.data_received(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert transport.closed
    assert bytes(transport.written).find(bytes([f.GOAWAY])) > 0


def test_grpc_message_is_percent_encoded() -> None:
    client = Client()
    client.frames()
    client.send(client.headers(1, LATER) + client.message(b"x", 1))
    client.later[0][1].finish(3, "bad input 'é' 100%")
    (answer,) = client.frames()
    trailers = client.decode(answer)
    assert trailers["grpc-status"] == "3"
    assert trailers["grpc-message"] == "bad input '%C3%A9' 100%25"


def test_shutdown_refuses_new_calls_and_waits_for_those_in_flight() -> None:
    async def scenario() -> None:
        client = Client()
        client.frames()
        client.send(client.headers(1, LATER) + client.message(b"x", 1))
        closing = asyncio.ensure_future(client.connection.drain_and_close(5))
        await asyncio.sleep(0)
        assert any(fr.type == f.GOAWAY for fr in client.frames())
        client.send(client.headers(3, ECHO) + client.message(b"y", 3))
        refused = client.frames()
        assert refused[0].type == f.RST_STREAM and refused[0].stream == 3
        assert not client.transport.closed
        client.later[0][1].respond(b"done")
        await asyncio.wait_for(closing, 1)
        assert list(messages(client.frames(), 1)) == [b"done"]
        assert client.transport.closed

    asyncio.run(scenario())


@pytest.mark.parametrize("bad", [2, 0])
def test_even_or_zero_stream_ids_are_protocol_errors(bad: int) -> None:
    client = Client()
    client.frames()
    client.send(client.headers(bad, ECHO))
    assert client.frames()[0].type == f.GOAWAY
    assert client.transport.closed


def test_a_client_that_does_not_read_stops_being_read() -> None:
    """asyncio says the write buffer is full: requests wait until the answers drain."""

    class PausableTransport(FakeTransport):
        def __init__(self) -> None:
            super().__init__()
            self.reading = True

        def pause_reading(self) -> None:
            self.reading = False

        def resume_reading(self) -> None:
            self.reading = True

    connection = GrpcConnection(lambda path: None, 1024)
    transport = PausableTransport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    connection.pause_writing()
    assert not transport.reading
    connection.resume_writing()
    assert transport.reading


def test_repeated_header_blocks_decode_as_hpack_does_after_the_table_changes() -> None:
    """Decoded all-indexed blocks are reused; a block that changes the dynamic table drops
    them, so the same bytes later decode against the new table."""
    client = Client()
    client.frames()
    blocks = [
        client.headers(1, ECHO)[9:],  # literals: the table grows
        client.headers(3, ECHO)[9:],  # all indexed: reusable
        client.headers(5, LATER)[9:],  # a new literal: entries shift
    ]
    reference = hpack.Decoder()
    for block in blocks:
        reference.decode(block, raw=True)
    assert min(blocks[1]) >= 0x80  # the case the reuse is for
    expected = [tuple(h) for h in reference.decode(blocks[1], raw=True)]

    connection = GrpcConnection(lambda path: None, 1024)
    decode = connection._decode_headers
    first = [tuple(h) for h in decode(blocks[0])]
    assert [tuple(h) for h in decode(blocks[1])] == first  # same headers, from the cache next
    assert decode(blocks[1]) is decode(blocks[1])
    decode(blocks[2])
    assert [tuple(h) for h in decode(blocks[1])] == expected
    assert expected != first


def test_calls_past_the_stream_limit_are_refused_until_one_ends() -> None:
    client = Client(max_streams=2)
    (settings, *_) = client.frames()
    assert (f.SETTINGS_MAX_CONCURRENT_STREAMS, 2) in f.parse_settings(settings.payload)
    client.send(client.headers(1, LATER) + client.message(b"a", 1))
    client.send(client.headers(3, LATER) + client.message(b"b", 3))
    client.send(client.headers(5, ECHO) + client.message(b"c", 5))
    (refused,) = client.frames()
    assert (refused.type, refused.stream) == (f.RST_STREAM, 5)
    assert int.from_bytes(refused.payload, "big") == f.REFUSED_STREAM  # safe to send again
    assert [message for message, _ in client.later] == [b"a", b"b"]
    client.later[0][1].respond(b"done")
    assert list(messages(client.frames(), 1)) == [b"done"]
    client.send(client.headers(7, ECHO) + client.message(b"cd", 7))
    assert list(messages(client.frames(), 7)) == [b"dc"]


def test_a_connection_past_the_limit_answers_its_call_unavailable_then_closes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(connection_module, "REFUSAL_LINGER_S", 0.05)

    async def scenario() -> None:
        client = Client(refusal="the server holds its limit of 2 open gRPC connections")
        client.frames()
        client.send(client.headers(1, ECHO) + client.message(b"x", 1))
        frames = client.frames()
        assert [fr.type for fr in frames] == [f.GOAWAY, f.HEADERS]
        trailers = client.decode(frames[1])
        assert trailers["grpc-status"] == "14"  # UNAVAILABLE: the call failed at once
        assert trailers["grpc-message"] == "the server holds its limit of 2 open gRPC connections"
        assert client.transport.closed  # no call left open
        silent = Client(refusal="limit")  # one that never calls is closed after the linger
        await asyncio.sleep(0.2)
        assert silent.transport.closed

    asyncio.run(scenario())
