"""The native connection's limits: a body over the size limit is refused from its
Content-Length before it is read (413), a chunked one as it goes over; oversized heads get 431;
a request not received whole in time gets 408, but not while the server paused reading or the
client waits for `100 Continue`; a refused connection half-closes and lingers before closing."""

from __future__ import annotations

import asyncio

import pytest

from serve.http.limits import HttpLimits
from serve.http.native import protocol
from tests.unit.serve.http.test_native_protocol import connect, get, parse, post

SMALL = HttpLimits(max_input_bytes=100, read_timeout_s=5.0, max_header_bytes=512)


def test_body_over_the_limit_is_refused_from_its_content_length() -> None:
    connection, transport, handler = connect(limits=SMALL)
    head = b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 101\r\n\r\n"
    connection.data_received(head)  # the body has not come: refused before it is read
    (refused,) = parse(transport.written)
    assert refused.status == 413
    assert b"101 bytes" in refused.body and b"--http-max-input-size" in refused.body
    assert refused.headers["connection"] == "close"
    assert transport.closed and handler.requests == []
    connection.data_received(b"x" * 101 + get("/after"))  # dropped, nothing more is read
    assert handler.requests == []


def test_body_at_the_limit_is_served() -> None:
    connection, transport, handler = connect(limits=SMALL)
    connection.data_received(post("/a", b"x" * 100))
    assert handler.requests[0].body == b"x" * 100
    assert not transport.closed


def test_chunked_body_is_refused_once_it_goes_over() -> None:
    connection, transport, handler = connect(limits=SMALL)
    head = b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    connection.data_received(head + b"40\r\n" + b"x" * 64 + b"\r\n")
    assert transport.written == b""
    connection.data_received(b"40\r\n" + b"y" * 64 + b"\r\n0\r\n\r\n")
    (refused,) = parse(transport.written)
    assert refused.status == 413 and b"128 bytes" in refused.body
    assert handler.requests == [] and transport.closed


def test_refusal_waits_for_the_answers_owed_before_it() -> None:
    connection, transport, handler = connect(limits=SMALL)
    big = b"POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"
    connection.data_received(get("/a") + big)
    assert transport.written == b""
    handler.answer(0)
    first, refused = parse(transport.written)
    assert first.status == 200 and refused.status == 413
    assert transport.closed


def test_oversized_request_head_is_refused_431() -> None:
    connection, transport, handler = connect(limits=SMALL)
    connection.data_received(get("/a", "X-Padding: " + "p" * 600))
    (refused,) = parse(transport.written)
    assert refused.status == 431 and transport.closed
    assert handler.requests == []


def test_oversized_target_is_refused_431() -> None:
    connection, transport, handler = connect(limits=SMALL)
    connection.data_received(get("/" + "a" * 600))
    (refused,) = parse(transport.written)
    assert refused.status == 431 and handler.requests == []


def test_a_request_half_sent_past_the_read_timeout_gets_408() -> None:
    connection, transport, handler = connect(limits=SMALL)
    connection.data_received(b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
    started = connection._read_started
    assert not connection.read_overdue(started + 4.9)
    assert connection.read_overdue(started + 5.1)
    connection.read_timed_out()
    (timed_out,) = parse(transport.written)
    assert timed_out.status == 408 and b"--http-read-timeout" in timed_out.body
    assert transport.closed and handler.requests == []


def test_a_half_sent_head_times_out_too() -> None:
    connection, _, _ = connect(limits=SMALL)
    connection.data_received(b"GET /a HTTP/1.1\r\nHost: x\r\n")
    assert connection.read_overdue(connection._read_started + 6)


def test_no_timeout_between_requests_or_after_a_whole_one() -> None:
    connection, _, _ = connect(limits=SMALL)
    assert not connection.read_overdue(1e9)  # idle: the idle limit's business
    connection.data_received(get("/a"))
    assert not connection.read_overdue(1e9)  # received whole, its answer pending


def test_no_timeout_while_the_client_waits_for_100_continue() -> None:
    connection, transport, handler = connect(limits=SMALL)
    connection.data_received(get("/a"))  # owed first: /b's 100 Continue must wait for it
    connection.data_received(
        b"POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n"
    )
    assert not connection.read_overdue(1e9)
    handler.answer(0)  # /b is first in line now: 100 Continue goes out, the clock starts
    assert b"100 Continue" in transport.written
    started = connection._read_started
    assert not connection.read_overdue(started + 4.9)
    assert connection.read_overdue(started + 5.1)


def test_no_timeout_while_the_server_paused_reading() -> None:
    connection, transport, handler = connect(max_pending=1, limits=SMALL)
    connection.data_received(get("/a") + b"GET /b HTTP/1.1\r\n")
    assert transport.paused  # one answer owed: reading stops
    assert not connection.read_overdue(1e9)
    handler.answer(0)
    assert not transport.paused
    started = connection._read_started
    assert not connection.read_overdue(started + 4.9)  # the clock restarted on resume
    assert connection.read_overdue(started + 5.1)


def test_a_refused_connection_half_closes_then_lingers_before_closing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(protocol, "LINGER_S", 0.01)

    async def scenario() -> None:
        connection, transport, _ = connect(limits=SMALL)
        transport.lingers = True
        connection.data_received(b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n")
        (refused,) = parse(transport.written)
        assert refused.status == 413
        assert transport.eof_written and not transport.closed
        connection.data_received(b"x" * 500)  # what the client still sends is dropped
        await asyncio.sleep(0.05)
        assert transport.closed

    asyncio.run(scenario())


def test_a_clean_close_does_not_linger() -> None:
    async def scenario() -> None:
        connection, transport, handler = connect(limits=SMALL)
        transport.lingers = True
        connection.data_received(get("/a", "Connection: close"))
        handler.answer(0)
        assert transport.closed and not transport.eof_written

    asyncio.run(scenario())
