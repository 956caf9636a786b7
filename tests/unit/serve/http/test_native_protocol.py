"""The native HTTP/1.1 connection against a fake transport: bytes in, answers out in order."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import httptools

from serve.http.limits import DEFAULT_LIMITS, HttpLimits
from serve.http.native.budget import BodyBudget
from serve.http.native.protocol import HttpConnection, HttpRequest, ResponseSlot

TEXT = b"content-type: text/plain\r\n"


class FakeTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False
        self.paused = False
        self.pauses = 0

    @property
    def written(self) -> bytes:
        return b"".join(self.writes)

    def write(self, data: bytes) -> None:
        assert not self.closed, "written after close"
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    lingers = False  # True: the connection may half-close (write_eof) before closing
    eof_written = False

    def can_write_eof(self) -> bool:
        return self.lingers

    def write_eof(self) -> None:
        self.eof_written = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        assert not self.paused
        self.paused = True
        self.pauses += 1

    def resume_reading(self) -> None:
        assert self.paused
        self.paused = False

    def get_extra_info(self, name: str) -> object:
        return ("127.0.0.1", 5000) if name in ("peername", "sockname") else None


@dataclass
class Handler:
    """Keeps every request and its slot; the test answers them when it likes."""

    requests: list[HttpRequest] = field(default_factory=list)
    slots: list[ResponseSlot] = field(default_factory=list)
    timing: bool = False

    def handle(self, request: HttpRequest, slot: ResponseSlot) -> None:
        self.requests.append(request)
        self.slots.append(slot)

    def answer(self, index: int, body: bytes | None = None, **kwargs: object) -> None:
        text = body if body is not None else self.requests[index].target
        self.slots[index].send(200, TEXT, text, **kwargs)  # type: ignore[arg-type]


@dataclass
class Response:
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


def parse(data: bytes, head: bool = False) -> list[Response]:
    """The complete responses in `data` (100 Continue included)."""
    responses: list[Response] = []

    class Callbacks:
        def on_message_begin(self) -> None:
            responses.append(Response())

        def on_header(self, name: bytes, value: bytes) -> None:
            responses[-1].headers[name.decode().lower()] = value.decode()

        def on_headers_complete(self) -> bool:
            responses[-1].status = parser.get_status_code()
            return head  # a HEAD answer has no body whatever its content-length

        def on_body(self, body: bytes) -> None:
            responses[-1].body += body

    parser = httptools.HttpResponseParser(Callbacks())
    parser.feed_data(data)
    return responses


def get(path: str, *headers: str, version: str = "1.1") -> bytes:
    lines = [f"GET {path} HTTP/{version}", "Host: x", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def post(path: str, body: bytes, *headers: str) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: x", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def connect(
    max_pending: int = 64, limits: HttpLimits = DEFAULT_LIMITS, budget: BodyBudget | None = None
) -> tuple[HttpConnection, FakeTransport, Handler]:
    handler = Handler()
    connection = HttpConnection(handler, max_pending=max_pending, limits=limits, budget=budget)
    transport = FakeTransport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    return connection, transport, handler


def test_pipelined_answers_leave_in_request_order_in_one_write() -> None:
    connection, transport, handler = connect()
    connection.data_received(get("/a") + post("/b", b"xyz") + get("/c"))
    assert [r.target for r in handler.requests] == [b"/a", b"/b", b"/c"]
    assert handler.requests[1].body == b"xyz"

    handler.answer(2)  # the last completes first: it waits
    handler.answer(1)
    assert transport.writes == []
    handler.answer(0)  # now all three go, in order, in one write
    assert len(transport.writes) == 1
    responses = parse(transport.written)
    assert [r.body for r in responses] == [b"/a", b"/b", b"/c"]
    assert all(r.headers["content-length"] == str(len(r.body)) for r in responses)
    assert not transport.closed


def test_each_answer_first_in_line_is_written_at_once() -> None:
    connection, transport, handler = connect()
    connection.data_received(get("/a") + get("/b"))
    handler.answer(0)
    assert [r.body for r in parse(transport.written)] == [b"/a"]
    handler.answer(1)
    assert [r.body for r in parse(transport.written)] == [b"/a", b"/b"]
    assert len(transport.writes) == 2


def test_request_split_across_reads() -> None:
    connection, _, handler = connect()
    data = post("/v2/models/m/infer", b'{"inputs": []}', "X-Some: thing")
    for i in range(0, len(data), 7):
        connection.data_received(data[i : i + 7])
    (request,) = handler.requests
    assert request.method == b"POST"
    assert request.target == b"/v2/models/m/infer"
    assert request.body == b'{"inputs": []}'
    assert request.header(b"x-some") == b"thing"


def test_expect_100_continue_answered_before_the_body() -> None:
    connection, transport, handler = connect()
    head = post("/a", b"0123456789", "Expect: 100-continue")[:-10]
    connection.data_received(head)
    assert transport.written == b"HTTP/1.1 100 Continue\r\n\r\n"
    assert handler.requests == []
    connection.data_received(b"0123456789")
    assert handler.requests[0].body == b"0123456789"
    handler.answer(0)
    interim, final = parse(transport.written)
    assert (interim.status, final.status, final.body) == (100, 200, b"/a")


def test_no_100_continue_when_the_body_came_with_the_headers() -> None:
    connection, transport, handler = connect()
    connection.data_received(post("/a", b"body", "Expect: 100-continue"))
    handler.answer(0)
    assert [r.status for r in parse(transport.written)] == [200]


def test_100_continue_waits_for_the_answers_before_it() -> None:
    connection, transport, handler = connect()
    second = post("/b", b"later", "Expect: 100-continue")[:-5]
    connection.data_received(get("/a") + second)
    assert transport.written == b""  # /a is unanswered: its answer comes first
    handler.answer(0)
    first, interim = parse(transport.written)
    assert (first.body, interim.status) == (b"/a", 100)
    connection.data_received(b"later")
    handler.answer(1)
    assert [r.status for r in parse(transport.written)] == [200, 100, 200]


def test_chunked_request_body_is_joined() -> None:
    connection, _, handler = connect()
    head = b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    connection.data_received(head + b"5\r\nhello\r\n")
    connection.data_received(b"6\r\n world\r\n0\r\n\r\n")
    assert handler.requests[0].body == b"hello world"


def test_malformed_request_gets_400_after_earlier_answers_then_close() -> None:
    connection, transport, handler = connect()
    connection.data_received(get("/a") + b"NOT HTTP AT ALL\r\n\r\n")
    assert transport.written == b"" and not transport.closed
    handler.answer(0)
    first, error = parse(transport.written)
    assert first.body == b"/a"
    assert error.status == 400
    assert error.headers["connection"] == "close"
    assert b"malformed HTTP request" in error.body
    assert transport.closed
    connection.data_received(get("/b"))  # nothing more is read
    assert len(handler.requests) == 1


def test_bad_chunk_encoding_is_malformed() -> None:
    connection, transport, handler = connect()
    head = b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    connection.data_received(head + b"zz\r\nhello\r\n")
    (error,) = parse(transport.written)
    assert error.status == 400 and transport.closed
    assert handler.requests == []


def test_connection_close_answers_then_closes() -> None:
    connection, transport, handler = connect()
    connection.data_received(get("/a", "Connection: close") + get("/ignored"))
    assert len(handler.requests) == 1
    handler.answer(0)
    (response,) = parse(transport.written)
    assert response.headers["connection"] == "close"
    assert transport.closed


def test_http_1_0_closes_unless_keep_alive_is_asked() -> None:
    connection, transport, handler = connect()
    connection.data_received(get("/a", version="1.0"))
    handler.answer(0)
    assert parse(transport.written)[0].headers["connection"] == "close"
    assert transport.closed

    connection, transport, handler = connect()
    connection.data_received(get("/a", "Connection: keep-alive", version="1.0"))
    handler.answer(0)
    assert parse(transport.written)[0].headers["connection"] == "keep-alive"
    assert not transport.closed


def test_head_answer_has_the_length_but_no_body() -> None:
    connection, transport, handler = connect()
    connection.data_received(b"HEAD /a HTTP/1.1\r\nHost: x\r\n\r\n" + get("/b"))
    handler.answer(0, b"twelve bytes")
    handler.answer(1)
    written = transport.written
    assert written.startswith(b"HTTP/1.1 200 OK\r\n")
    head_part, rest = written.split(b"\r\n\r\n", 1)
    assert b"content-length: 12" in head_part
    assert rest.startswith(b"HTTP/1.1 200 OK")  # the next answer follows the headers at once
    assert parse(rest)[0].body == b"/b"


def test_every_answer_has_a_content_length() -> None:
    connection, transport, handler = connect()
    connection.data_received(get("/a"))
    handler.slots[0].send(503, b"", b"")
    (response,) = parse(transport.written)
    assert (response.status, response.headers["content-length"]) == (503, "0")


def test_client_gone_mid_request_drops_its_answers_quietly() -> None:
    connection, transport, handler = connect()
    written: list[str] = []
    connection.data_received(
        get("/a") + get("/b") + b"POST /c HTTP/1.1\r\nContent-Length: 9\r\n\r\n12"
    )
    handler.answer(1, on_written=lambda: written.append("b"))  # waits for /a
    connection.connection_lost(None)
    assert written == ["b"]  # dropped with the connection: its callback ran
    handler.answer(0, on_written=lambda: written.append("a"))  # completes after the close
    assert written == ["b", "a"]
    assert transport.writes == []
    connection.data_received(get("/d"))  # late bytes are ignored
    assert len(handler.requests) == 2


def test_reading_pauses_while_too_many_answers_are_owed() -> None:
    connection, transport, handler = connect(max_pending=2)
    connection.data_received(get("/a"))
    assert not transport.paused
    connection.data_received(get("/b"))
    assert transport.paused
    handler.answer(0)
    assert not transport.paused
    handler.answer(1)
    assert not transport.paused and transport.pauses == 1


def test_reading_pauses_while_the_transport_cannot_write() -> None:
    connection, transport, handler = connect()
    connection.pause_writing()
    assert transport.paused
    connection.data_received(get("/a"))  # already read bytes are still handled
    handler.answer(0)
    assert transport.paused  # answering does not resume reading while writing is paused
    connection.resume_writing()
    assert not transport.paused


def test_upgrade_is_answered_as_a_plain_request_then_closed() -> None:
    connection, transport, handler = connect()
    connection.data_received(get("/a", "Connection: Upgrade", "Upgrade: h2c") + b"\x00binary")
    handler.answer(0)
    assert parse(transport.written)[0].body == b"/a"
    assert transport.closed


def test_handler_error_is_answered_500() -> None:
    class Failing(Handler):
        def handle(self, request: HttpRequest, slot: ResponseSlot) -> None:
            raise RuntimeError("boom")

    connection = HttpConnection(Failing())
    transport = FakeTransport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    connection.data_received(get("/a"))
    (response,) = parse(transport.written)
    assert response.status == 500 and b"boom" in response.body


def test_stop_answers_what_is_owed_then_closes() -> None:
    async def scenario() -> None:
        connection, transport, handler = connect()
        connection.data_received(get("/a") + get("/b"))
        stopping = asyncio.ensure_future(connection.drain_and_close(5))
        await asyncio.sleep(0)
        assert not transport.closed
        handler.answer(1)
        handler.answer(0)
        first, last = parse(transport.written)
        assert "connection" not in first.headers
        assert last.headers["connection"] == "close"
        assert transport.closed
        connection.connection_lost(None)
        await asyncio.wait_for(stopping, 5)

        idle, idle_transport, _ = connect()
        await asyncio.wait_for(asyncio.ensure_future(_lose_when_closed(idle, idle_transport)), 5)
        assert idle_transport.closed and idle_transport.writes == []

    asyncio.run(scenario())


async def _lose_when_closed(connection: HttpConnection, transport: FakeTransport) -> None:
    stopping = asyncio.ensure_future(connection.drain_and_close(5))
    await asyncio.sleep(0)
    assert transport.closed
    connection.connection_lost(None)
    await stopping


def test_stop_gives_up_after_the_grace() -> None:
    async def scenario() -> None:
        connection, transport, handler = connect()
        connection.data_received(get("/late"))
        await connection.drain_and_close(0.01)
        assert transport.closed
        written: list[str] = []
        handler.answer(0, on_written=lambda: written.append("late"))  # not written: closing
        assert transport.writes == []
        connection.connection_lost(None)
        assert written == ["late"]

    asyncio.run(scenario())
