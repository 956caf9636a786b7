"""One HTTP/1.1 client connection on asyncio.BufferedProtocol, parsed by httptools.

Each request gets a `ResponseSlot` in the connection's queue when its headers are read; a
handler answers it (now or later, from any callback on the loop) with `slot.send`, and answers
leave in request order: a pipelined request answered early waits for those before it, and
every answer ready at once goes out in one `transport.write`. No task or future per request.

HTTP/1.1 as clients use it: keep-alive (idle connections stay open for the client to close),
`Connection: close` and HTTP/1.0 (closed after the answer unless it asks for keep-alive),
`Expect: 100-continue` (the interim answer once the request is first in line and its body has
not arrived), chunked bodies (httptools joins them), HEAD (headers only), Content-Length on
every answer. A malformed request is answered 400 after the answers before it, then the
connection closes; so are requests past the `HttpLimits`: a body over the size limit (413,
refused from its Content-Length before the body is read, or as a chunked body goes over),
a request line and headers over theirs (431), a request not received whole in time (408,
from the endpoint's sweep). Backpressure: reading stops while `MAX_PENDING` answers wait or
the transport asks to pause writing (the read clock stops with it).

Large bodies without copies: the connection is an `asyncio.BufferedProtocol`. Request lines,
headers and small bodies are read into a read buffer and parsed by httptools (a buffer is
taken for one read and given back once that read is parsed: the connections share a few, and
an idle one holds none); a body of at least `DIRECT_BODY_MIN` bytes announced by
Content-Length gets a buffer of its size once its headers are read, and the socket is read
straight into it (the parser is bypassed for those bytes and replaced by a fresh one after the
body): the body is written once in user space, and the handler gets it as a memoryview. An
answer's body may be several buffers (a large binary output's arrays): they go to the socket
in one `writelines`, without joining them first.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from http import HTTPStatus
from typing import Any, Protocol, cast

import httptools
import numpy as np

from serve.http.codec import encode_error
from serve.http.limits import DEFAULT_LIMITS, HttpLimits
from serve.http.native.budget import BodyBudget

log = logging.getLogger("serve.http")

# Answers a connection may owe before it stops reading more requests (pipelining clients).
MAX_PENDING = 64
# How long a connection whose request was refused still reads (and drops) what the client
# sends before it closes.
LINGER_S = 2.0

_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_CONNECTION_CLOSE = b"connection: close\r\n"
_CONNECTION_KEEP_ALIVE = b"connection: keep-alive\r\n"
_CONTENT_LENGTH = b"content-length: "
_CONTENT_LENGTH_NAME = b"content-length"
_CRLF = b"\r\n"
_CHUNKED = b"transfer-encoding: chunked\r\n"
_LAST_CHUNK = b"0\r\n\r\n"
_EXPECT = b"expect"
_TRANSFER_ENCODING = b"transfer-encoding"
_JSON_HEADER = b"content-type: application/json\r\n"
_NO_BODY = (204, 304)
_UPGRADE = b"upgrade"

# A Content-Length body at least this large is read straight into a buffer of its own.
DIRECT_BODY_MIN = 1 << 16
# A read buffer for request lines, headers and small bodies.
READ_SIZE = 1 << 16
# Read buffers given back by their connection: an event loop reads one socket at a time, so
# one buffer serves every connection (a client that falls behind may hold thousands of them
# open); a loop that keeps several reads under way (proactor) leaves a few here.
_spare_read_buffers: list[memoryview] = []
_MAX_SPARE_READ_BUFFERS = 8

# A body: bytes, or one buffer read in place (a memoryview); an answer's may be several buffers
# (a large one: written with writelines, without joining them).
Body = bytes | memoryview
AnswerBody = bytes | list[bytes | memoryview]


def _status_line(status: int) -> bytes:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    return f"HTTP/1.1 {status} {phrase}\r\n".encode("latin-1")


_STATUS_LINES = {status: _status_line(status) for status in range(100, 600)}


Address = tuple[str, int]


class HttpRequest:
    """A request as read: method, target (the raw URL) and headers (names lower-cased) as
    bytes; the whole body (bytes, or a writable memoryview of a large body read in place);
    `recv_start` is when its headers were read (monotonic ns, 0 when
    the handler does not time requests)."""

    __slots__ = ("body", "headers", "http_version", "method", "recv_start", "target")

    def __init__(
        self,
        method: bytes,
        target: bytes,
        headers: list[tuple[bytes, bytes]],
        body: Body,
        http_version: str,
        recv_start: int,
    ) -> None:
        self.method = method
        self.target = target
        self.headers = headers
        self.body = body
        self.http_version = http_version
        self.recv_start = recv_start

    def header(self, name: bytes) -> bytes | None:
        """The first value of a header (`name` lower-case)."""
        for key, value in self.headers:
            if key == name:
                return value
        return None


class RequestHandler(Protocol):
    """What answers the requests of a connection (see `serve.http.native.routes`)."""

    @property
    def timing(self) -> bool:
        """Whether requests should carry `recv_start` (the core traces requests)."""
        ...

    def handle(self, request: HttpRequest, slot: ResponseSlot) -> None:
        """Answer the request, now or later, with `slot.send` exactly once."""
        ...


class ResponseSlot:
    """The place of one request's answer in its connection's queue."""

    __slots__ = (
        "_connection",
        "body",
        "body_received",
        "close",
        "content_length",
        "continued",
        "expect_continue",
        "head",
        "head_only",
        "keep_alive_header",
        "on_lost",
        "on_written",
        "stream",
    )

    def __init__(self, connection: HttpConnection, close: bool, head_only: bool) -> None:
        self._connection = connection
        self.close = close  # close the connection after this answer
        self.head_only = head_only  # a HEAD request: headers without the body
        self.keep_alive_header = False  # an HTTP/1.0 keep-alive request: say so in the answer
        self.expect_continue = False
        self.continued = False
        self.body_received = False
        self.head: bytes | None = None  # status line and headers, without the framing ones
        self.body: AnswerBody = b""
        self.content_length = -1
        self.on_written: Callable[[], None] | None = None
        # Set by a handler that answers later: the connection closed before the answer.
        self.on_lost: Callable[[], None] | None = None
        self.stream: _Stream | None = None  # an answer sent in pieces (open_stream)

    def send(
        self,
        status: int,
        headers: bytes,
        body: AnswerBody,
        on_written: Callable[[], None] | None = None,
        content_length: int = -1,
    ) -> None:
        """Answer: `headers` are whole header lines ("name: value\\r\\n" each), without
        Content-Length and Connection, which the connection adds; `body` is bytes or a list of
        byte buffers sent one after the other; `content_length` (a HEAD answer's, when `body`
        is empty) replaces the body's length. `on_written` runs once the answer is
        written, or dropped with its connection."""
        if self.head is not None:
            raise RuntimeError("a request is answered once")
        status_line = _STATUS_LINES.get(status) or _status_line(status)
        self.head = status_line + headers if headers else status_line
        self.body = body
        self.content_length = -2 if status < 200 or status in _NO_BODY else content_length
        self.on_written = on_written
        self._connection._answered(self)

    def open_stream(self, status: int, headers: bytes) -> None:
        """Answer in pieces (chunked transfer coding): the head now, each `push` as it comes
        (written at once when this answer is first in line), `end_stream` last. Later answers
        of the connection wait for the end."""
        if self.head is not None:
            raise RuntimeError("a request is answered once")
        status_line = _STATUS_LINES.get(status) or _status_line(status)
        self.head = status_line + headers
        self.stream = _Stream()
        self._connection._answered(self)

    def push(self, data: bytes) -> None:
        """One piece of a streamed answer (dropped once the connection is gone)."""
        stream = self.stream
        if stream is None or stream.ended:
            raise RuntimeError("push needs an open stream")
        if data:
            stream.pieces.append(data)
            self._connection._answered(self)

    def end_stream(self) -> None:
        stream = self.stream
        if stream is None or stream.ended:
            return
        stream.ended = True
        self._connection._answered(self)

    def addresses(self) -> tuple[Address | None, Address | None]:
        """(client, server) as ASGI's scope gives them."""
        return self._connection.addresses()

    def disconnected(self) -> asyncio.Future[None]:
        """Done when the connection is gone (the ASGI bridge's `http.disconnect`)."""
        return self._connection.lost()


class HttpConnection(asyncio.BufferedProtocol):
    """The server side of one HTTP/1.1 connection."""

    def __init__(
        self,
        handler: RequestHandler,
        on_lost: Callable[[HttpConnection], None] | None = None,
        max_pending: int = MAX_PENDING,
        limits: HttpLimits = DEFAULT_LIMITS,
        budget: BodyBudget | None = None,
    ) -> None:
        self._handler = handler
        self._on_lost = on_lost
        self._max_pending = max_pending
        self._limits = limits
        self._budget = budget  # shared by the endpoint's connections; None: no budget
        self._reserved = 0  # of the budget, for the body being read
        self._wanted = 0  # asked of the budget and not granted yet: reading is paused
        self._parser = httptools.HttpRequestParser(self)
        self._reading: memoryview | None = None  # a read buffer taken for the read under way
        self._transport: asyncio.Transport | None = None
        self._pending: deque[ResponseSlot] = deque()
        self._lost: asyncio.Future[None] | None = None
        self._addresses: tuple[Address | None, Address | None] | None = None
        # the request being read
        self._in_message = False
        self._target = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._body: list[bytes] = []
        self._method = b""
        self._version = "1.1"
        # a body read in place: its buffer and how much of it has arrived
        self._direct: memoryview | None = None
        self._direct_got = 0
        self._slot: ResponseSlot | None = None
        self._recv_start = 0
        self._head_bytes = 0  # request line and headers read
        self._body_bytes = 0
        self._read_started = 0.0  # monotonic seconds: the request's first byte, or the resume
        self._refused = False  # answered a refusal: close lingering
        self._linger: asyncio.TimerHandle | None = None
        # connection state
        self._stopped = False  # no more requests are read (close asked, malformed, stopping)
        self._read_paused = False
        self._write_paused = False
        self._draining = False
        self._closing = False
        self.active = False  # set on every read; the idle sweep clears it

    # -- asyncio.BufferedProtocol ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        if self._linger is not None:
            self._linger.cancel()
        self._stopped = True
        self._direct = None
        if self._reading is not None:  # the read that found the close never reached buffer_updated
            _give_back_read_buffer(self._reading)
            self._reading = None
        self._return_budget()
        pending = list(self._pending)  # the request being read is in it, last
        self._pending.clear()
        self._slot = None
        for slot in pending:
            slot.close = True
            if slot.head is None and slot.on_lost is not None:
                _run(slot.on_lost)  # the client went away before its answer
            if slot.on_written is not None:
                _run(slot.on_written)
                slot.on_written = None
        if self._lost is not None and not self._lost.done():
            self._lost.set_result(None)
        if self._on_lost is not None:
            self._on_lost(self)

    def pause_writing(self) -> None:
        # The client reads its answers slower than they are written: stop reading its
        # requests until the transport's buffer drains.
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._update_reading()

    def get_buffer(self, sizehint: int) -> memoryview:
        direct = self._direct
        if direct is not None:
            return direct[self._direct_got :]
        if self._reading is None:
            self._reading = _take_read_buffer()
        return self._reading

    def buffer_updated(self, nbytes: int) -> None:
        self.active = True
        if self._direct is not None:
            self._direct_got += nbytes
            if self._direct_got == len(self._direct):
                # The parser never saw these bytes: end the message here and start a new one.
                self._parser = httptools.HttpRequestParser(self)
                self.on_message_complete()
                self._update_reading()
            return
        reading, self._reading = self._reading, None
        if reading is None:
            raise RuntimeError("buffer_updated without get_buffer")
        try:
            self._feed(reading[:nbytes])
        finally:
            _give_back_read_buffer(reading)

    def data_received(self, data: bytes) -> None:
        """Bytes as a plain `asyncio.Protocol` gets them (tests feed a connection this way):
        copied in through `get_buffer` / `buffer_updated`, as the transport reads."""
        self.active = True
        view = memoryview(data)
        while view:
            buffer = self.get_buffer(len(view))
            size = min(len(buffer), len(view))
            buffer[:size] = view[:size]
            view = view[size:]
            self.buffer_updated(size)

    def _feed(self, data: memoryview) -> None:
        if self._stopped:
            return  # after a request that closes the connection, or a malformed one
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # Upgrades (h2c, websocket) are not served: the request was answered as a plain
            # one, and the bytes after it belong to another protocol.
            self._stop_reading()
        except httptools.HttpParserError as exc:
            if not self._stopped:  # bytes after `Connection: close` are not an error
                self._malformed(str(exc))
        self._continue_first()
        self._update_reading()

    # -- httptools callbacks -----------------------------------------------------------------

    # Once `_stopped`, the rest of the bytes being parsed are not read as requests: the
    # callbacks that keep data or create answers return at once.

    def on_message_begin(self) -> None:
        if self._stopped:
            return
        self._in_message = True
        self._target = b""
        self._headers = []
        self._body = []
        self._direct = None
        self._head_bytes = 0
        self._body_bytes = 0
        self._read_started = time.monotonic()

    def on_url(self, url: bytes) -> None:
        if self._stopped:
            return
        self._target += url
        self._head_bytes += len(url)
        if self._head_bytes > self._limits.max_header_bytes:
            self._refuse(431, self._limits.headers_too_large())

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._stopped:
            return
        self._headers.append((name.lower(), value))
        self._head_bytes += len(name) + len(value)
        if self._head_bytes > self._limits.max_header_bytes:
            self._refuse(431, self._limits.headers_too_large())

    def on_headers_complete(self) -> None:
        if self._stopped:
            return
        parser = self._parser
        method = self._method = parser.get_method()
        self._version = parser.get_http_version()
        slot = ResponseSlot(self, not parser.should_keep_alive(), method == b"HEAD")
        http_1_0 = self._version == "1.0"
        if http_1_0:
            slot.keep_alive_header = not slot.close
        body_size = 0
        direct = True
        for name, value in self._headers:
            if name == _CONTENT_LENGTH_NAME:
                # httptools has checked it is a number (a repeated one differing is an error)
                body_size = int(value)
                if body_size > self._limits.max_input_bytes:
                    self._refuse(413, self._limits.too_large(body_size))
                    return
            elif name == _EXPECT and not http_1_0:
                slot.expect_continue = value.lower() == b"100-continue"
            elif name == _TRANSFER_ENCODING and b"chunked" in value.lower():
                body_size = self._limits.max_input_bytes  # its size is known only at its end
                direct = False
            elif name == _UPGRADE:
                direct = False
        self._slot = slot
        self._pending.append(slot)
        self._recv_start = time.monotonic_ns() if self._handler.timing else 0
        if body_size and self._budget is not None:
            if self._budget.reserve(self, body_size):
                self._reserved = body_size
            else:
                self._wanted = body_size  # reading pauses (data_received's _update_reading)
        if direct and body_size >= DIRECT_BODY_MIN:
            # not zero-filled: every byte is read into it before it is used
            self._direct = _byte_buffer(body_size)
            self._direct_got = 0

    def on_body(self, body: bytes) -> None:
        if self._slot is None:  # refused, or after the parse stopped
            return
        self._body_bytes += len(body)
        direct = self._direct
        if direct is not None:  # the start of a body read in place, read with its headers
            got = self._direct_got
            self._direct_got = got + len(body)
            direct[got : self._direct_got] = body
            return
        if self._body_bytes > self._limits.max_input_bytes:  # a chunked body
            self._refuse(413, self._limits.too_large(self._body_bytes))
            return
        self._body.append(body)

    def on_message_complete(self) -> None:
        slot = self._slot
        self._slot = None
        self._in_message = False
        self._read_started = 0.0
        if slot is None:  # refused, or after the parse stopped
            return
        slot.body_received = True
        body: Body
        if self._direct is not None:
            body, self._direct = self._direct, None
        else:
            parts = self._body
            body = parts[0] if len(parts) == 1 else b"".join(parts)
        self._body = []
        request = HttpRequest(
            self._method, self._target, self._headers, body, self._version, self._recv_start
        )
        if slot.close:
            self._stopped = True
        try:
            self._handler.handle(request, slot)
        except Exception as exc:
            log.exception("HTTP request handler failed")
            if slot.head is None:
                slot.send(500, _JSON_HEADER, encode_error(f"internal error: {exc!r}"))
        finally:
            if self._reserved or self._wanted:
                self._return_budget()

    # -- the endpoint's body budget --------------------------------------------------------

    def budget_granted(self, size: int) -> None:
        self._wanted = 0
        self._reserved = size
        self._update_reading()

    def _return_budget(self) -> None:
        budget = self._budget
        if budget is None:
            return
        if self._wanted:
            self._wanted = 0
            budget.withdraw(self)
        if self._reserved:
            reserved, self._reserved = self._reserved, 0
            budget.release(reserved)

    # -- answering ---------------------------------------------------------------------------

    def _answered(self, answered: ResponseSlot) -> None:
        """A slot was answered: write every answer now first in line."""
        transport = self._transport
        if transport is None:  # the connection is gone: drop the answer
            if answered.on_written is not None:
                _run(answered.on_written)
                answered.on_written = None
            return
        if self._closing:  # closed after an earlier answer: connection_lost drops the rest
            return
        pending = self._pending
        if not pending or pending[0].head is None:
            return
        out: list[bytes | memoryview] = []
        written: list[Callable[[], None]] = []
        close = False
        gather = False  # an answer's body is several buffers: write them without a join
        while pending:
            slot = pending[0]
            head = slot.head
            if head is None:
                break
            stream = slot.stream
            if stream is not None:
                if not stream.started:
                    stream.started = True
                    out += (head, _CHUNKED)
                    if slot.close:
                        out.append(_CONNECTION_CLOSE)
                    out.append(_CRLF)
                for piece in stream.pieces:
                    out += (b"%x\r\n" % len(piece), piece, _CRLF)
                stream.pieces.clear()
                if not stream.ended:
                    break  # the answers behind it wait for its end
                out.append(_LAST_CHUNK)
            pending.popleft()
            if self._draining and not pending and not self._in_message:
                slot.close = True  # the last answer owed before the server stops
            if stream is None:
                out.append(head)
                if _frame(slot, out):
                    gather = True
            if slot.on_written is not None:
                written.append(slot.on_written)
                slot.on_written = None
            if slot.close:
                close = True
                break
        if not out:
            return
        if gather:
            transport.writelines(out)
        elif len(out) == 1:
            transport.write(out[0])
        else:
            transport.write(b"".join(out))
        for on_written in written:
            _run(on_written)
        if close:
            self._close()
            return
        self._continue_first()
        self._update_reading()

    def _continue_first(self) -> None:
        """`100 Continue` for the first request in line when it waits for it."""
        if not self._pending:
            return
        slot = self._pending[0]
        if slot.expect_continue and not slot.continued and not slot.body_received:
            slot.continued = True
            if slot.head is None and self._transport is not None and not self._closing:
                self._transport.write(_CONTINUE)
                self._read_started = time.monotonic()  # the body's clock starts now

    def _malformed(self, reason: str) -> None:
        log.warning("malformed HTTP request: %s", reason)
        self._refuse(400, f"malformed HTTP request: {reason}")

    def _refuse(self, status: int, message: str) -> None:
        """Answer the request being read with `status` (after the answers owed before it) and
        close: nothing more is read from this connection."""
        if status != 400:
            log.warning("HTTP request refused (%d): %s", status, message)
        self._stopped = True
        self._refused = True
        slot = self._slot
        self._slot = None
        self._in_message = False
        self._read_started = 0.0
        self._body = []
        self._direct = None
        self._return_budget()
        if slot is None or slot.head is not None:
            slot = ResponseSlot(self, True, False)
            self._pending.append(slot)
        slot.close = True
        slot.head_only = False
        slot.send(status, _JSON_HEADER, encode_error(message))

    def _stop_reading(self) -> None:
        """Read no more requests: close once the answers owed are written."""
        self._stopped = True
        if self._pending:
            self._pending[-1].close = True
        elif not self._in_message:
            self._close()

    def _update_reading(self) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        pause = self._write_paused or len(self._pending) >= self._max_pending or self._wanted > 0
        if pause != self._read_paused:
            self._read_paused = pause
            if pause:
                transport.pause_reading()
            else:
                transport.resume_reading()
                if self._in_message:  # the time paused is the server's, not the client's
                    self._read_started = time.monotonic()

    def _close(self) -> None:
        transport = self._transport
        if transport is None:
            return
        self._closing = True
        if self._refused and transport.can_write_eof():
            # A refused client may still be sending what was refused: closing with its bytes
            # unread would reset the connection, and the client could lose the answer before
            # reading it. Say we are done writing, read and drop what comes, close soon after.
            transport.write_eof()
            self._linger = asyncio.get_running_loop().call_later(LINGER_S, transport.close)
            return
        transport.close()

    # -- lifetime ----------------------------------------------------------------------------

    @property
    def idle(self) -> bool:
        """No answer owed and no request half read."""
        return not self._pending and not self._in_message

    def addresses(self) -> tuple[Address | None, Address | None]:
        if self._addresses is None:
            transport = self._transport
            if transport is None:
                return None, None
            self._addresses = (
                _address(transport.get_extra_info("peername")),
                _address(transport.get_extra_info("sockname")),
            )
        return self._addresses

    def lost(self) -> asyncio.Future[None]:
        if self._lost is None:
            self._lost = asyncio.get_running_loop().create_future()
            if self._transport is None:
                self._lost.set_result(None)
        return self._lost

    def read_overdue(self, now: float) -> bool:
        """A request has been on its way longer than the read timeout allows (not counting a
        time reading was paused, or a wait for `100 Continue`)."""
        started = self._read_started
        if not started or self._read_paused or self._stopped:
            return False
        slot = self._slot
        if slot is not None and slot.expect_continue and not slot.continued:
            return False
        return now - started > self._limits.read_timeout_s

    def read_timed_out(self) -> None:
        """Answer the overdue request 408 and close."""
        self._refuse(408, self._limits.read_timed_out())

    def close_if_idle(self) -> bool:
        if self._transport is not None and self.idle:
            self._close()
            return True
        return False

    async def drain_and_close(self, grace_s: float) -> None:
        """Answer what is owed (up to `grace_s`), then close; an idle connection closes now."""
        if self._transport is None:
            return
        self._draining = True
        if self.idle:
            self._close()
        elif self._pending and self._pending[-1].head is not None and not self._in_message:
            self._pending[-1].close = True  # already answered, waiting for those before it
        try:
            await asyncio.wait_for(asyncio.shield(self.lost()), grace_s)
        except TimeoutError:
            log.warning("HTTP: closing a connection with %d answers owed", len(self._pending))
            self._close()


class _Stream:
    """A streamed answer's pieces not written yet, and where it stands."""

    __slots__ = ("ended", "pieces", "started")

    def __init__(self) -> None:
        self.pieces: list[bytes] = []
        self.started = False  # its head is written: pieces go out as they come
        self.ended = False


def _frame(slot: ResponseSlot, out: list[bytes | memoryview]) -> bool:
    """Content-Length, Connection, the blank line and the body after the slot's head; True
    when the body went in as several buffers."""
    body = slot.body
    length = slot.content_length
    if length != -2:  # 1xx, 204 and 304 answers carry neither Content-Length nor a body
        if length < 0:
            length = len(body) if isinstance(body, bytes) else sum(len(part) for part in body)
        out += (_CONTENT_LENGTH, b"%d" % length, _CRLF)
    if slot.close:
        out.append(_CONNECTION_CLOSE)
    elif slot.keep_alive_header:
        out.append(_CONNECTION_KEEP_ALIVE)
    out.append(_CRLF)
    if body and not slot.head_only:
        if isinstance(body, bytes):
            out.append(body)
        else:
            out += body
            return True
    return False


def _take_read_buffer() -> memoryview:
    if _spare_read_buffers:
        return _spare_read_buffers.pop()
    return memoryview(bytearray(READ_SIZE))


def _give_back_read_buffer(buffer: memoryview) -> None:
    if len(_spare_read_buffers) < _MAX_SPARE_READ_BUFFERS:
        _spare_read_buffers.append(buffer)


def _byte_buffer(size: int) -> memoryview:
    """A writable buffer of `size` bytes, not zero-filled (every byte is read into it)."""
    array: Any = np.empty(size, np.uint8)
    return memoryview(array).cast("B")


def _address(name: object) -> Address | None:
    if isinstance(name, tuple) and len(name) >= 2:
        return str(name[0]), int(name[1])
    return None


def _run(callback: Callable[[], None]) -> None:
    try:
        callback()
    except Exception:
        log.exception("HTTP answer callback failed")
