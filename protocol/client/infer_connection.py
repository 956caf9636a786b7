"""One keep-alive HTTP/1.1 connection carrying infer requests, one at a time: the load
generator's hot path.

Requests are prebuilt bytes (`build_infer_request`), written with one `transport.write`.
Responses are parsed by httptools; a 200 body is skipped without being copied, any other
status becomes an error record carrying the server's message. Completion is reported through a
callback (no Task or Future per request) with a raw record tuple, cheap to keep and to send
between processes; `RequestRecord(*raw)` turns it into the analyzer's record.

Every request sent ends in exactly one record: a response, an error status, a malformed
response, a lost connection or a connection that could not be opened.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from time import perf_counter_ns
from typing import cast

import httptools

from protocol.client.http import connect_error_reason, error_message

# (start_ns, end_ns, send_ns, recv_ns, ok, error): RequestRecord's leading fields, in order.
RawRecord = tuple[int, int, int, int, bool, str]
DoneCallback = Callable[["InferConnection", RawRecord], None]

_CONNECTING, _OPEN, _CLOSED = 0, 1, 2


class InferConnection(asyncio.Protocol):
    """A connection for `loop.create_connection(lambda: conn, host, port)`.

    `send()` may be called before the connection is made: the request then goes out once it
    is. After `on_done` reports a record the connection is free for the next `send()` unless
    `closed` (then the owner opens a new one).
    """

    def __init__(self, address: str, on_done: DoneCallback) -> None:
        self._address = address
        self._on_done = on_done
        self._parser = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        self._state = _CONNECTING
        self.was_open = False  # False after a failed connect: the owner backs off
        self._pending: bytes | None = None
        self._busy = False
        self._start = 0
        self._send_ns = 0
        self._first = 0
        self._end = 0
        self._complete = False
        self._keep_alive = True
        self._error_body: list[bytes] | None = None

    @property
    def closed(self) -> bool:
        return self._state == _CLOSED

    @property
    def busy(self) -> bool:
        return self._busy

    def send(self, request: bytes) -> None:
        """Send one request; its record arrives through `on_done`. Not while busy or closed."""
        transport = self._transport
        if transport is None:
            if self._state == _CLOSED:
                raise RuntimeError("send() on a closed InferConnection")
            self._pending = request
            self._busy = True
            return
        self._busy = True
        self._first = 0
        start = perf_counter_ns()
        transport.write(request)
        self._send_ns = perf_counter_ns() - start
        self._start = start

    def connect_failed(self, reason: str) -> None:
        """The owner's `create_connection` failed: the pending request (if any) fails."""
        self._state = _CLOSED
        self._pending = None
        if self._busy:
            self._fail(f"cannot reach the server at {self._address}: {reason}")

    def close(self, reason: str = "") -> None:
        """Close; a request in flight fails now with `reason`."""
        self._state = _CLOSED
        self._pending = None
        if self._transport is not None:
            self._transport.close()
        if self._busy:
            self._fail(reason or "the client closed the connection before the response")

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's are not asyncio subclasses
        if self._state == _CLOSED:  # closed while connecting
            transport.close()
            return
        self._transport = transport
        self._state = _OPEN
        self.was_open = True
        request, self._pending = self._pending, None
        if request is not None:
            self.send(request)

    def data_received(self, data: bytes) -> None:
        if not self._first:
            self._first = perf_counter_ns()
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.close(f"malformed HTTP response from the server at {self._address}: {exc}")
            return
        if self._complete:
            self._finish()

    def connection_lost(self, exc: Exception | None) -> None:
        self._state = _CLOSED
        self._transport = None
        self._complete = False
        if self._busy:
            reason = f": {connect_error_reason(exc)}" if exc is not None else ""
            self._fail(f"the server at {self._address} closed the connection{reason}")

    # httptools callbacks

    def on_headers_complete(self) -> None:
        # Read here: once the message is complete the parser describes the next one.
        self._keep_alive = self._parser.should_keep_alive()
        if self._parser.get_status_code() != 200:
            self._error_body = []

    def on_body(self, body: bytes) -> None:
        if self._error_body is not None:
            self._error_body.append(body)

    def on_message_complete(self) -> None:
        self._end = perf_counter_ns()
        self._complete = True

    # internals

    def _finish(self) -> None:
        self._complete = False
        end = self._end
        if not self._busy:  # a response nobody asked for: the stream is out of step
            self.close()
            return
        if self._error_body is None:
            record = (self._start, end, self._send_ns, end - self._first, True, "")
        else:
            message = error_message(self._parser.get_status_code(), b"".join(self._error_body))
            self._error_body = None
            record = (self._start, end, self._send_ns, end - self._first, False, message)
        self._busy = False
        self._start = 0
        if not self._keep_alive:
            self.close()
        self._on_done(self, record)

    def _fail(self, message: str) -> None:
        end = perf_counter_ns()
        written = self._start != 0
        start = self._start if written else end
        send_ns = self._send_ns if written else 0
        recv_ns = end - self._first if written and self._first else 0
        self._busy = False
        self._start = 0
        self._error_body = None
        self._on_done(self, (start, end, send_ns, recv_ns, False, message))
