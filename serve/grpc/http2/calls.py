"""A gRPC call on one HTTP/2 stream (`Call`), and what the HTTP/2 layer asks of the methods
that answer calls."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

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


class StreamListener(Protocol):
    """Receives a streaming call's messages, in order."""

    def on_message(self, message: bytes) -> None: ...

    def on_half_close(self) -> None:
        """The client sent its last message; the listener finishes the call when it is done."""
        ...

    def on_cancel(self) -> None:
        """The client reset the stream or the connection closed: stop sending."""
        ...


UnaryHandler = Callable[[bytes, "Call"], None]
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
    __slots__ = ("block",)

    def __init__(self, block: bytes) -> None:
        self.block = block


class Call:
    """One RPC on one stream. Methods answer through it; after `finish` (or `respond`) it
    ignores further sends, as it does once the client has cancelled."""

    __slots__ = (
        "_connection",
        "_headers_sent",
        "_inbox",
        "_listener",
        "_method",
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
        self._inbox = bytearray()
        self._request: bytes | None = None
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

    def respond(self, message: bytes) -> None:
        """Answer a unary call: the response message, then status OK."""
        if self.closed:
            return
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

    def send_message(self, message: bytes) -> None:
        """One message of a streaming answer."""
        if self.closed:
            return
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

    def receive(self, data: bytes, end_stream: bool) -> None:
        if self.closed or self.cancelled:
            return
        inbox = self._inbox
        inbox += data
        limit = self._connection.max_message_bytes
        while len(inbox) >= 5:
            length = int.from_bytes(inbox[1:5], "big")
            if length > limit:
                self._fail_early(
                    RESOURCE_EXHAUSTED,
                    f"received message larger than max ({length} vs. {limit})",
                )
                return
            if len(inbox) < 5 + length:
                break
            if inbox[0] != 0:
                self._fail_early(UNIMPLEMENTED, "compressed messages are not supported")
                return
            message = bytes(inbox[5 : 5 + length])
            del inbox[: 5 + length]
            self._deliver(message)
            if self.closed:
                return
        if end_stream:
            self.half_close()

    def half_close(self) -> None:
        self.remote_closed = True
        if self.closed or self.cancelled:
            return
        if self._inbox:
            self._fail_early(INTERNAL, "the stream ended inside a message")
            return
        if self._method.open_stream is not None:
            self._stream_listener().on_half_close()
            return
        if self._request is None:
            self.finish(UNIMPLEMENTED, "a unary call needs one request message, got none")
            return
        request, self._request = self._request, None
        unary = self._method.unary
        assert unary is not None
        try:
            unary(request, self)
        except Exception as exc:  # a method's bug must not take the connection down
            log.exception("gRPC method failed")
            self.finish(INTERNAL, f"internal error: {exc}")

    def _deliver(self, message: bytes) -> None:
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
            opener = self._method.open_stream
            assert opener is not None
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
