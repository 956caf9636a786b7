"""One client connection: HTTP/2 framing, flow control and gRPC messages on asyncio.Protocol.

A call's response goes out in as few writes as possible: a unary answer that fits the flow
control windows is one `transport.write` of HEADERS + DATA + trailers. Incoming DATA is
acknowledged as it is read (window updates in bulk), so a client is never stalled by a slow
method; a message over the size limit ends its call with RESOURCE_EXHAUSTED.

Reading copies nothing twice: frames are read from memoryviews of what arrived; a DATA frame's
payload goes to its call piece by piece as it arrives (the call gathers each message once), so
only an incomplete frame header or an incomplete non-DATA (or padded DATA) frame is kept
between reads, in a bytearray that grows and is trimmed in place.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any, cast

import hpack

from serve.grpc.http2 import frames as f
from serve.grpc.http2.calls import (
    INTERNAL,
    PERMISSION_DENIED,
    UNAVAILABLE,
    UNIMPLEMENTED,
    Call,
    Router,
    RpcMethod,
    Trailers,
)
from serve.grpc.limits import DEFAULT_MAX_STREAMS

log = logging.getLogger("serve.grpc")


# The receive window offered per stream and per connection, topped up once half is used.
LOCAL_WINDOW = 1 << 24
_TOP_UP = LOCAL_WINDOW // 2


@functools.cache
def _server_settings(max_streams: int) -> bytes:
    return f.settings_frame(
        {
            f.SETTINGS_MAX_CONCURRENT_STREAMS: max_streams,
            f.SETTINGS_INITIAL_WINDOW_SIZE: LOCAL_WINDOW,
            f.SETTINGS_MAX_FRAME_SIZE: (1 << 24) - 1,
            f.SETTINGS_MAX_HEADER_LIST_SIZE: 1 << 16,
        }
    ) + f.window_update(0, LOCAL_WINDOW - f.DEFAULT_WINDOW)


# How long a connection past the server's limit stays open for its refusals to be read.
REFUSAL_LINGER_S = 2.0

_HEADER_CACHE_SIZE = 64  # distinct all-indexed header blocks kept per connection

_PATH = b":path"
_CONTENT_TYPE = b"content-type"
_GRPC_CONTENT_TYPE = b"application/grpc"


class Http2ProtocolError(Exception):
    """A connection-level protocol error: GOAWAY with `code`, then close."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class GrpcConnection(asyncio.Protocol):
    """The server side of one HTTP/2 connection carrying gRPC calls."""

    def __init__(
        self,
        router: Router,
        max_message_bytes: int,
        on_lost: Any = None,
        max_streams: int = DEFAULT_MAX_STREAMS,
        refusal: str = "",
    ) -> None:
        """`refusal`: this connection is one past the server's limit: each call it opens is
        answered UNAVAILABLE with this message (gRPC clients fail the call at once; a GOAWAY
        before any call would leave them retrying until their deadline), then GOAWAY; the
        connection is closed after `REFUSAL_LINGER_S` in any case."""
        self._router = router
        self.max_message_bytes = max_message_bytes
        self._max_streams = max_streams
        self._refusal = refusal
        self._on_lost = on_lost
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()  # an incomplete frame kept between reads
        self._preface_seen = False
        # a DATA frame whose payload is still arriving: its stream, flags and bytes to come
        self._data_stream = 0
        self._data_flags = 0
        self._data_left = 0
        self._decoder = hpack.Decoder()
        self._header_cache: dict[bytes, list[tuple[bytes, bytes]]] = {}
        self._calls: dict[int, Call] = {}
        self._blocked: dict[int, Call] = {}
        self._last_stream_id = 0
        self._header_block: tuple[int, int, list[bytes]] | None = None  # id, flags, fragments
        self.peer_initial_window = f.DEFAULT_WINDOW
        self.peer_max_frame = f.DEFAULT_MAX_FRAME
        self.send_window = f.DEFAULT_WINDOW
        self._recv_unacked = 0
        self._going_away = False
        self._idle = asyncio.Event()
        self._idle.set()

    # -- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self._transport.write(_server_settings(self._max_streams))
        if self._refusal:
            asyncio.get_running_loop().call_later(REFUSAL_LINGER_S, self._close_transport)

    def connection_lost(self, exc: Exception | None) -> None:
        calls = list(self._calls.values())
        self._calls.clear()
        self._blocked.clear()
        for call in calls:
            call.cancel()
        self._transport = None
        self._idle.set()
        if self._on_lost is not None:
            self._on_lost(self)

    def pause_writing(self) -> None:
        # The client reads slower than it is answered: stop reading its requests until the
        # answers already written drain, so a client that never reads cannot grow our memory.
        if self._transport is not None:
            self._transport.pause_reading()

    def resume_writing(self) -> None:
        if self._transport is not None:
            self._transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        try:
            if buffer:
                buffer += data
                with memoryview(buffer) as view:
                    consumed = self._read_frames(view)
                self._keep(buffer, consumed)
            else:
                with memoryview(data) as view:
                    consumed = self._read_frames(view)
                    if consumed < len(view):
                        self._buffer = bytearray(view[consumed:])
        except Http2ProtocolError as exc:
            log.warning("gRPC connection closed: %s", exc)
            self.write(f.goaway(self._last_stream_id, exc.code, str(exc).encode()[:200]))
            self._close_transport()

    # -- writing -----------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if self._transport is not None:
            self._transport.write(data)

    def writelines(self, parts: list[bytes | memoryview]) -> None:
        """Buffers written one after the other, without joining them first."""
        if self._transport is not None:
            self._transport.writelines(parts)

    def flush(self, call: Call, out: list[bytes]) -> None:
        """Send what the windows allow of the call's pending data (and its trailers)."""
        pending = call.pending
        sid = call.stream_id
        while pending:
            item = pending[0]
            if isinstance(item, Trailers):
                pending.popleft()
                out.append(f.frame(f.HEADERS, f.END_HEADERS | f.END_STREAM, sid, item.block))
                self.write(b"".join(out))
                call.close_local()
                return
            allowed = min(len(item), call.send_window, self.send_window, self.peer_max_frame)
            if allowed <= 0 and item:
                self._blocked[sid] = call
                break
            piece = item if allowed == len(item) else item[:allowed]
            out.append(f.frame(f.DATA, 0, sid, piece))
            call.send_window -= allowed
            self.send_window -= allowed
            if allowed == len(item):
                pending.popleft()
            else:
                pending[0] = item[allowed:]
        else:
            self._blocked.pop(sid, None)
        if out:
            self.write(b"".join(out))

    def call_closed(self, call: Call) -> None:
        self._calls.pop(call.stream_id, None)
        self._blocked.pop(call.stream_id, None)
        if not self._calls:
            self._idle.set()
            if self._going_away:
                self._close_transport()

    # -- shutdown ----------------------------------------------------------------------------

    async def drain_and_close(self, grace_s: float) -> None:
        """GOAWAY: no new calls; answer those in flight (up to `grace_s`), then close."""
        if self._transport is None:
            return
        self._going_away = True
        self.write(f.goaway(self._last_stream_id, f.NO_ERROR))
        if self._calls:
            try:
                await asyncio.wait_for(self._idle.wait(), grace_s)
            except TimeoutError:
                log.warning("gRPC: %d calls still open at shutdown", len(self._calls))
        self._close_transport()

    def _close_transport(self) -> None:
        if self._transport is not None:
            self._transport.close()

    # -- reading -----------------------------------------------------------------------------

    def _keep(self, buffer: bytearray, consumed: int) -> None:
        """Drop the first `consumed` bytes of the kept buffer."""
        if consumed == len(buffer):
            buffer.clear()
        elif consumed:
            del buffer[:consumed]

    def _read_frames(self, buffer: memoryview) -> int:
        """Handle every complete frame in `buffer`, and what has arrived of a DATA frame;
        returns how many bytes were used (the rest is an incomplete frame)."""
        position = 0
        size = len(buffer)
        if not self._preface_seen:
            head = bytes(buffer[: len(f.PREFACE)])
            if size < len(f.PREFACE):
                if not f.PREFACE.startswith(head):
                    raise Http2ProtocolError(f.PROTOCOL_ERROR, "not an HTTP/2 connection preface")
                return 0
            if head != f.PREFACE:
                raise Http2ProtocolError(f.PROTOCOL_ERROR, "not an HTTP/2 connection preface")
            self._preface_seen = True
            position = len(f.PREFACE)
        out: list[bytes] = []
        if self._data_left:  # the rest of a DATA frame
            position = min(self._data_left, size)
            self._data_left -= position
            self._on_data_piece(buffer[:position], out)
        while size - position >= f.FRAME_HEADER_BYTES:
            length = int.from_bytes(buffer[position : position + 3], "big")
            end = position + f.FRAME_HEADER_BYTES + length
            frame_type = buffer[position + 3]
            flags = buffer[position + 4]
            stream_id = f.read_u31(buffer, position + 5)
            start = position + f.FRAME_HEADER_BYTES
            if end > size:
                if frame_type == f.DATA and not flags & f.PADDED and self._header_block is None:
                    # its payload goes to the call as it arrives
                    self._data_stream = stream_id
                    self._data_flags = flags
                    self._data_left = end - size
                    self._check_data_stream(stream_id)
                    self._on_data_piece(buffer[start:size], out)
                    position = size
                break
            payload = buffer[start:end]
            position = end
            self._handle(frame_type, flags, stream_id, payload, out)
        if self._recv_unacked >= _TOP_UP:
            out.append(f.window_update(0, self._recv_unacked))
            self._recv_unacked = 0
        if out:
            self.write(b"".join(out))
        return position

    def _handle(
        self, frame_type: int, flags: int, stream_id: int, payload: memoryview, out: list[bytes]
    ) -> None:
        """One whole frame; `payload` is a view of the read buffer: kept only as a copy."""
        if self._header_block is not None and frame_type != f.CONTINUATION:
            raise Http2ProtocolError(f.PROTOCOL_ERROR, "expected a CONTINUATION frame")
        if frame_type == f.DATA:
            self._on_data(flags, stream_id, payload, out)
        elif frame_type == f.HEADERS:
            self._on_headers(flags, stream_id, bytes(payload))
        elif frame_type == f.CONTINUATION:
            self._on_continuation(flags, stream_id, bytes(payload))
        elif frame_type == f.SETTINGS:
            if not flags & f.ACK:
                # Acknowledged before anything else is sent: the peer applies its own new
                # limits (e.g. a larger frame size) only from the ACK on.
                self.write(b"".join(out) + f.frame(f.SETTINGS, f.ACK, 0))
                out.clear()
                self._on_settings(bytes(payload))
        elif frame_type == f.WINDOW_UPDATE:
            self._on_window_update(stream_id, bytes(payload))
        elif frame_type == f.PING:
            if not flags & f.ACK:
                out.append(f.frame(f.PING, f.ACK, 0, bytes(payload)))
        elif frame_type == f.RST_STREAM:
            call = self._calls.pop(stream_id, None)
            self._blocked.pop(stream_id, None)
            if call is not None:
                call.cancel()
                if not self._calls:
                    self._idle.set()
        elif frame_type == f.GOAWAY:
            self._going_away = True
            if not self._calls:
                self._close_transport()
        elif frame_type == f.PUSH_PROMISE:
            raise Http2ProtocolError(f.PROTOCOL_ERROR, "a client cannot push")
        # PRIORITY and unknown frame types are ignored, as RFC 9113 asks.

    def _check_data_stream(self, stream_id: int) -> None:
        if stream_id not in self._calls and (stream_id == 0 or stream_id > self._last_stream_id):
            raise Http2ProtocolError(f.PROTOCOL_ERROR, f"DATA on idle stream {stream_id}")

    def _on_data_piece(self, piece: memoryview, out: list[bytes]) -> None:
        """Part of the payload of an unpadded DATA frame; the last part when nothing is left."""
        self._recv_unacked += len(piece)
        stream_id = self._data_stream
        call = self._calls.get(stream_id)
        if call is None:
            return  # a stream we already closed or reset
        end_stream = not self._data_left and bool(self._data_flags & f.END_STREAM)
        call.recv_unacked += len(piece)
        if call.recv_unacked >= _TOP_UP and not end_stream:
            out.append(f.window_update(stream_id, call.recv_unacked))
            call.recv_unacked = 0
        call.receive(piece, end_stream)

    def _on_data(self, flags: int, stream_id: int, payload: memoryview, out: list[bytes]) -> None:
        self._recv_unacked += len(payload)
        if flags & f.PADDED:
            payload = _strip_padding(payload)
        call = self._calls.get(stream_id)
        if call is None:
            self._check_data_stream(stream_id)
            return  # a stream we already closed or reset
        call.recv_unacked += len(payload)
        if call.recv_unacked >= _TOP_UP and not flags & f.END_STREAM:
            out.append(f.window_update(stream_id, call.recv_unacked))
            call.recv_unacked = 0
        call.receive(payload, bool(flags & f.END_STREAM))

    def _on_headers(self, flags: int, stream_id: int, payload: bytes) -> None:
        if flags & f.PADDED:
            payload = bytes(_strip_padding(memoryview(payload)))
        if flags & f.PRIORITY_FLAG:
            payload = payload[5:]
        if not flags & f.END_HEADERS:
            self._header_block = (stream_id, flags, [payload])
            return
        self._on_header_block(flags, stream_id, payload)

    def _on_continuation(self, flags: int, stream_id: int, payload: bytes) -> None:
        if self._header_block is None or self._header_block[0] != stream_id:
            raise Http2ProtocolError(f.PROTOCOL_ERROR, "unexpected CONTINUATION frame")
        fragments = self._header_block[2]
        fragments.append(payload)
        if sum(len(p) for p in fragments) > 1 << 20:
            raise Http2ProtocolError(f.PROTOCOL_ERROR, "header block too large")
        if flags & f.END_HEADERS:
            first_flags = self._header_block[1]
            self._header_block = None
            self._on_header_block(first_flags, stream_id, b"".join(fragments))

    def _on_header_block(self, flags: int, stream_id: int, block: bytes) -> None:
        headers = self._decode_headers(block)
        end_stream = bool(flags & f.END_STREAM)
        call = self._calls.get(stream_id)
        if call is not None:  # trailers from the client end its side
            if end_stream:
                call.receive(b"", True)
            return
        if stream_id % 2 == 0 or stream_id <= self._last_stream_id:
            raise Http2ProtocolError(f.PROTOCOL_ERROR, f"bad new stream id {stream_id}")
        self._last_stream_id = stream_id
        if self._going_away or len(self._calls) >= self._max_streams:
            # REFUSED_STREAM: the call was not started, so a client may send it again
            self.write(f.rst_stream(stream_id, f.REFUSED_STREAM))
            return
        path = content_type = b""
        for name, value in headers:
            if name == _PATH:
                path = value
            elif name == _CONTENT_TYPE:
                content_type = value
        method = self._router(path)
        call = Call(self, stream_id, method or RpcMethod())
        self._calls[stream_id] = call
        self._idle.clear()
        if self._refusal:
            self._going_away = True
            self.write(f.goaway(stream_id, f.NO_ERROR))
            call.finish(UNAVAILABLE, self._refusal)
        elif not content_type.startswith(_GRPC_CONTENT_TYPE):
            call.finish(INTERNAL, f"content-type must be application/grpc, got {content_type!r}")
        elif method is None:
            call.finish(UNIMPLEMENTED, f"unknown method {path.decode('latin-1')}")
        elif method.admit is not None and (denied := method.admit(headers)) is not None:
            call.finish(PERMISSION_DENIED, denied)
        elif end_stream:
            call.half_close()

    def _decode_headers(self, block: bytes) -> list[tuple[bytes, bytes]]:
        """HPACK-decode a header block. A client repeats its request headers, and once they
        are in the dynamic table the block is the same bytes each time, all one-byte indexed
        fields (each byte 0x80-0xFE): decoding such a block does not change the table, so its
        result is kept and reused until a block that may change the table is decoded."""
        cached = self._header_cache.get(block)
        if cached is not None:
            return cached
        try:
            headers = cast(list[tuple[bytes, bytes]], self._decoder.decode(block, raw=True))
        except Exception as exc:  # hpack raises several types for malformed blocks
            raise Http2ProtocolError(f.COMPRESSION_ERROR, f"bad header block: {exc}") from None
        if block and min(block) >= 0x80 and 0xFF not in block:
            if len(self._header_cache) < _HEADER_CACHE_SIZE:
                self._header_cache[block] = headers
        else:
            self._header_cache.clear()
        return headers

    def _on_settings(self, payload: bytes) -> None:
        if len(payload) % 6:
            raise Http2ProtocolError(f.FRAME_SIZE_ERROR, "SETTINGS payload is not a multiple of 6")
        for key, value in f.parse_settings(payload):
            if key == f.SETTINGS_INITIAL_WINDOW_SIZE:
                if value > f.MAX_WINDOW:
                    raise Http2ProtocolError(f.FLOW_CONTROL_ERROR, "initial window too large")
                delta = value - self.peer_initial_window
                self.peer_initial_window = value
                for call in self._calls.values():
                    call.send_window += delta
                self._unblock()
            elif key == f.SETTINGS_MAX_FRAME_SIZE:
                if not f.DEFAULT_MAX_FRAME <= value <= (1 << 24) - 1:
                    raise Http2ProtocolError(f.PROTOCOL_ERROR, "bad SETTINGS_MAX_FRAME_SIZE")
                self.peer_max_frame = value

    def _on_window_update(self, stream_id: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise Http2ProtocolError(f.FRAME_SIZE_ERROR, "WINDOW_UPDATE payload must be 4 bytes")
        increment = f.read_u31(payload)
        if stream_id == 0:
            self.send_window += increment
            if self.send_window > f.MAX_WINDOW:
                raise Http2ProtocolError(f.FLOW_CONTROL_ERROR, "connection window overflow")
            self._unblock()
            return
        call = self._calls.get(stream_id)
        if call is not None:
            call.send_window += increment
            if call.stream_id in self._blocked:
                self.flush(call, [])

    def _unblock(self) -> None:
        for call in list(self._blocked.values()):
            if self.send_window <= 0:
                break
            self.flush(call, [])


def _strip_padding(payload: memoryview) -> memoryview:
    if not payload:
        raise Http2ProtocolError(f.PROTOCOL_ERROR, "padded frame without pad length")
    pad = payload[0]
    if pad >= len(payload):
        raise Http2ProtocolError(f.PROTOCOL_ERROR, "padding exceeds the frame")
    return payload[1 : len(payload) - pad]
