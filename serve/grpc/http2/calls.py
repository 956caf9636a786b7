"""A gRPC call on one HTTP/2 stream (`Call`), and what the HTTP/2 layer asks of the methods
that answer calls.

A call gathers each message once: once its 5-byte prefix has arrived, a buffer of the message's
size is made and the DATA pieces are copied into it as they come. A message of at least
`LARGE_MESSAGE` bytes is handed to its method as a memoryview of that buffer (its tensors are
read from it in place); a smaller one as bytes.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from common.invariant import present
from serve.grpc.http2 import frames as f

if TYPE_CHECKING:
    from serve.grpc.http2.connection import GrpcConnection

log = logging.getLogger("serve.grpc")

# gRPC status codes used by the framing layer itself.
INTERNAL = 13
UNIMPLEMENTED = 12
RESOURCE_EXHAUSTED = 8
UNAVAILABLE = 14
PERMISSION_DENIED = 7

# A message at least this large is handed over in the buffer it was gathered in.
LARGE_MESSAGE = 1 << 16

Message = bytes | memoryview


class StreamListener(Protocol):
    """Receives a streaming call's messages, in order."""

    def on_message(self, message: Message) -> None: ...

    def on_half_close(self) -> None:
        """The client sent its last message; the listener finishes the call when it is done."""
        ...

    def on_cancel(self) -> None:
        """The client reset the stream or the connection closed: stop sending."""
        ...


UnaryHandler = Callable[[Message, "Call"], None]
StreamOpener = Callable[["Call"], StreamListener]


@dataclass(frozen=True, slots=True)
class RpcMethod:
    """One method: `unary` gets the request message and answers with `call.respond` or
    `call.finish` (now or later); `open_stream` gets the call of a bidirectional stream;
    `admit`, when set, looks at the call's request headers first: a message it returns
    refuses the call with PERMISSION_DENIED."""

    unary: UnaryHandler | None = None
    open_stream: StreamOpener | None = None
    admit: Callable[[list[tuple[bytes, bytes]]], str | None] | None = None


Router = Callable[[bytes], RpcMethod | None]  # ':path' -> method, None when unknown


class Trailers:
    """A call's status trailers (an HPACK block), queued behind its pending DATA so that they are
    sent only once everything before them has been."""

    __slots__ = ("block",)

    def __init__(self, block: bytes) -> None:
        self.block = block


class Call:
    """One RPC on one stream. Methods answer through it; after `finish` (or `respond`) it
    ignores further sends, as it does once the client has cancelled."""

    __slots__ = (
        "_connection",
        "_got",
        "_headers_sent",
        "_listener",
        "_message",
        "_method",
        "_prefix",
        "_request",
        "cancelled",
        "closed",
        "on_cancel",
        "pending",
        "recv_unacked",
        "remote_closed",
        "send_window",
        "stream_id",
    )

    def __init__(self, connection: GrpcConnection, stream_id: int, method: RpcMethod) -> None:
        self.stream_id = stream_id
        self._connection = connection
        self._method = method
        self._prefix = bytearray()  # a message prefix split between reads
        self._message: memoryview | None = None  # the message being gathered
        self._got = 0  # of its bytes
        self._request: Message | None = None
        self._listener: StreamListener | None = None
        self._headers_sent = False
        self.pending: deque[bytes | Trailers] = deque()
        self.send_window = connection.peer_initial_window
        self.recv_unacked = 0
        self.closed = False  # our side is done
        self.cancelled = False
        self.remote_closed = False
        self.on_cancel: Callable[[], None] | None = None  # a unary method's, while it runs

    # -- answering ---------------------------------------------------------------------------

    def respond(self, message: Message | list[bytes | memoryview]) -> None:
        """Answer a unary call: the response message (or its bytes as buffers in order, written
        without joining them when they fit the windows), then status OK."""
        if self.closed:
            return
        if isinstance(message, list):
            if self._respond_parts(message):
                return
            message = b"".join(message)
        elif not isinstance(message, bytes):
            message = bytes(message)
        connection = self._connection
        size = len(message) + 5
        if (
            not self._headers_sent
            and not self.pending
            and size <= self.send_window
            and size <= connection.send_window
            and size <= connection.peer_max_frame
        ):
            self.send_window -= size
            connection.send_window -= size
            sid = self.stream_id
            connection.write(
                b"".join(
                    (
                        f.frame(f.HEADERS, f.END_HEADERS, sid, f.RESPONSE_HEADERS),
                        f.frame_header(f.DATA, 0, sid, size),
                        f.message_prefix(len(message)),
                        message,
                        f.frame(f.HEADERS, f.END_HEADERS | f.END_STREAM, sid, f.OK_TRAILERS),
                    )
                )
            )
            self.close_local()
            return
        self.send_message(message)
        self.finish(0)

    def _respond_parts(self, parts: list[bytes | memoryview]) -> bool:
        """`respond` in one `writelines` when the whole answer fits the windows and one frame."""
        connection = self._connection
        length = sum(len(part) for part in parts)
        size = length + 5
        if (
            self._headers_sent
            or self.pending
            or size > self.send_window
            or size > connection.send_window
            or size > connection.peer_max_frame
        ):
            return False
        self.send_window -= size
        connection.send_window -= size
        sid = self.stream_id
        connection.writelines(
            [
                f.frame(f.HEADERS, f.END_HEADERS, sid, f.RESPONSE_HEADERS)
                + f.frame_header(f.DATA, 0, sid, size)
                + f.message_prefix(length),
                *parts,
                f.frame(f.HEADERS, f.END_HEADERS | f.END_STREAM, sid, f.OK_TRAILERS),
            ]
        )
        self.close_local()
        return True

    def send_message(self, message: Message) -> None:
        """One message of a streaming answer."""
        if self.closed:
            return
        if not isinstance(message, bytes):
            message = bytes(message)
        out = []
        if not self._headers_sent:
            self._headers_sent = True
            out.append(f.frame(f.HEADERS, f.END_HEADERS, self.stream_id, f.RESPONSE_HEADERS))
        self.pending.append(f.message_prefix(len(message)) + message)
        self._connection.flush(self, out)

    def finish(self, code: int, message: str = "") -> None:
        """End the call with a gRPC status (0: OK)."""
        if self.closed:
            return
        sid = self.stream_id
        trailers = f.status_trailers(code, message) if code else f.OK_TRAILERS
        if not self._headers_sent:  # trailers-only answer
            self._headers_sent = True
            block = f.RESPONSE_HEADERS + trailers
            self._connection.write(f.frame(f.HEADERS, f.END_HEADERS | f.END_STREAM, sid, block))
            self.close_local()
        else:
            self.pending.append(Trailers(trailers))
            self._connection.flush(self, [])

    def close_local(self) -> None:
        self.closed = True
        self.pending.clear()
        self._connection.call_closed(self)

    # -- receiving ---------------------------------------------------------------------------

    def receive(self, data: bytes | memoryview, end_stream: bool) -> None:
        """DATA bytes of this stream (copied; `data` is not kept)."""
        if self.closed or self.cancelled:
            return
        position = 0
        size = len(data)
        while position < size:
            message = self._message
            if message is None:
                prefix = self._prefix
                if not prefix and size - position >= 5:
                    length = int.from_bytes(data[position + 1 : position + 5], "big")
                    if not self._check_prefix(data[position], length):
                        return
                    position += 5
                    if length < LARGE_MESSAGE and size - position >= length:
                        # the whole (small) message is here: one copy
                        self._deliver(bytes(data[position : position + length]))
                        position += length
                        if self.closed:
                            return
                        continue
                else:
                    take = min(5 - len(prefix), size - position)
                    prefix += data[position : position + take]
                    position += take
                    if len(prefix) < 5:
                        break
                    length = int.from_bytes(prefix[1:5], "big")
                    if not self._check_prefix(prefix[0], length):
                        return
                    prefix.clear()
                if length == 0:
                    self._deliver(b"")
                    if self.closed:
                        return
                    continue
                message = self._message = _message_buffer(length)
                self._got = 0
            got = self._got
            take = min(len(message) - got, size - position)
            message[got : got + take] = data[position : position + take]
            position += take
            got = self._got = got + take
            if got == len(message):
                self._message = None
                self._deliver(message if got >= LARGE_MESSAGE else bytes(message))
                if self.closed:
                    return
        if end_stream:
            self.half_close()

    def _check_prefix(self, compressed: int, length: int) -> bool:
        """Whether a message with this prefix can be read; answers the call when not."""
        limit = self._connection.max_message_bytes
        if length > limit:
            self._fail_early(
                RESOURCE_EXHAUSTED, f"received message larger than max ({length} vs. {limit})"
            )
            return False
        if compressed != 0:
            self._fail_early(UNIMPLEMENTED, "compressed messages are not supported")
            return False
        return True

    def half_close(self) -> None:
        self.remote_closed = True
        if self.closed or self.cancelled:
            return
        if self._prefix or self._message is not None:
            self._fail_early(INTERNAL, "the stream ended inside a message")
            return
        if self._method.open_stream is not None:
            self._stream_listener().on_half_close()
            return
        if self._request is None:
            self.finish(UNIMPLEMENTED, "a unary call needs one request message, got none")
            return
        request, self._request = self._request, None
        unary = present(self._method.unary, "a unary call's method has a unary handler")
        try:
            unary(request, self)
        except Exception as exc:  # a method's bug must not take the connection down
            log.exception("gRPC method failed")
            self.finish(INTERNAL, f"internal error: {exc}")

    def _deliver(self, message: Message) -> None:
        if self._method.open_stream is not None:
            try:
                self._stream_listener().on_message(message)
            except Exception as exc:
                log.exception("gRPC stream handler failed")
                self.finish(INTERNAL, f"internal error: {exc}")
            return
        if self._request is not None:
            self._fail_early(UNIMPLEMENTED, "a unary call takes one request message, got more")
            return
        self._request = message

    def _stream_listener(self) -> StreamListener:
        if self._listener is None:
            opener = present(self._method.open_stream, "a stream's method opens streams")
            self._listener = opener(self)
        return self._listener

    def _fail_early(self, code: int, message: str) -> None:
        """Answer before the request is complete and tell the client to stop sending."""
        self.finish(code, message)
        if not self.remote_closed:
            self._connection.write(f.rst_stream(self.stream_id, f.NO_ERROR))

    def cancel(self) -> None:
        if self.cancelled:
            return
        self.cancelled = True
        self.closed = True
        self.pending.clear()
        if self.on_cancel is not None:
            on_cancel, self.on_cancel = self.on_cancel, None
            try:
                on_cancel()
            except Exception:
                log.exception("gRPC call cancel handler failed")
        if self._listener is not None:
            try:
                self._listener.on_cancel()
            except Exception:
                log.exception("gRPC stream cancel handler failed")


def _message_buffer(size: int) -> memoryview:
    """A writable buffer for a message of `size` bytes (a large one not zero-filled: every
    byte is copied into it)."""
    if size < LARGE_MESSAGE:
        return memoryview(bytearray(size))
    array: Any = np.empty(size, np.uint8)
    return memoryview(array).cast("B")
