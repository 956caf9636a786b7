"""The HTTP/2 gRPC connection fed fuzzed frames (hypothesis, derandomized): valid calls mixed
with frames of every type carrying random flags, stream ids and payloads, broken header blocks,
gRPC messages whose length prefix lies, and plain garbage. Whatever comes, `data_received`
never raises (an exception there would drop the connection without a word): the connection
either goes on or writes GOAWAY and closes, and everything it writes is whole frames."""

from __future__ import annotations

import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from serve.grpc.http2 import frames as f
from tests.unit.serve.grpc.http2.test_connection import ECHO, STREAM, Client

FUZZ = settings(
    derandomize=True,
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
STREAM_IDS = st.sampled_from([0, 1, 2, 3, 5, 7, 2**31 - 1])


@st.composite
def _frame(draw: st.DrawFn, client: Client) -> bytes:
    kind = draw(st.sampled_from(["headers", "message", "random", "garbage"]))
    stream = draw(STREAM_IDS)
    if kind == "headers":
        path = draw(st.sampled_from([ECHO, STREAM, b"/x/Unknown", b""]))
        block = client.headers(stream, path, end_stream=draw(st.booleans()))
        if draw(st.booleans()):  # a header block cut or corrupted
            cut = draw(st.integers(9, len(block)))
            block = block[:cut] + draw(st.binary(max_size=6))
            block = struct.pack(">I", len(block) - 9)[1:] + block[3:]
        return block
    if kind == "message":
        payload = draw(st.binary(max_size=32))
        declared = draw(st.sampled_from([len(payload), len(payload) + 3, 2**31, 0]))
        compressed = draw(st.sampled_from([b"\x00", b"\x01"]))
        body = compressed + struct.pack(">I", declared) + payload
        flags = f.END_STREAM if draw(st.booleans()) else 0
        return f.frame(f.DATA, flags, stream, body)
    if kind == "random":
        frame_type = draw(st.integers(0, 12))
        flags = draw(st.integers(0, 255))
        return f.frame(frame_type, flags, stream, draw(st.binary(max_size=40)))
    return draw(st.binary(min_size=1, max_size=40))


def _whole_frames(data: bytes) -> bool:
    position = 0
    while position + 9 <= len(data):
        position += 9 + int.from_bytes(data[position : position + 3], "big")
    return position == len(data)


@FUZZ
@given(st.data())
def test_fuzzed_frames_never_escape_the_connection(data: st.DataObject) -> None:
    client = Client(max_message_bytes=1 << 10)
    sent = b""
    for _ in range(data.draw(st.integers(1, 8))):
        chunk = data.draw(_frame(client))
        sent += chunk
        client.send(chunk)  # must not raise
        if client.transport.closed:
            break
    written = bytes(client.transport.written)
    assert _whole_frames(written), "the connection wrote a cut frame"
    if client.transport.closed and f.GOAWAY not in _frame_types(sent):
        # closed on its own: it says why first (a client's GOAWAY needs no answer)
        assert any(fr.type == f.GOAWAY for fr in client.frames())


def _frame_types(data: bytes) -> set[int]:
    """The types of the whole frames at the start of `data` (what a server would parse)."""
    types = set()
    position = 0
    while position + 9 <= len(data):
        types.add(data[position + 3])
        position += 9 + int.from_bytes(data[position : position + 3], "big")
    return types
