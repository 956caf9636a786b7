"""The native HTTP endpoint's sweep and connection cap: a connection idle for the whole idle
limit is closed (a peer that vanished), one that reads or owes an answer is kept; a request
overdue is answered 408; past the connection limit, requests are answered 503."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

from serve.http.limits import DEFAULT_LIMITS, HttpLimits
from serve.http.native.endpoint import NativeHttpEndpoint
from serve.http.native.routes import NativeRoutes
from tests.unit.serve.http.test_native_protocol import FakeTransport, get, parse

IDLE_S = 3600.0


def _endpoint(limits: HttpLimits = DEFAULT_LIMITS) -> NativeHttpEndpoint:
    dataplane = SimpleNamespace(tracer=SimpleNamespace(active=False))
    return NativeHttpEndpoint(
        "HTTPService",
        NativeRoutes(dataplane, control_plane=None),  # type: ignore[arg-type]
        address="127.0.0.1",
        port=0,
        idle_close_s=IDLE_S,
        limits=limits,
    )


def test_only_connections_idle_for_the_whole_limit_are_closed() -> None:
    async def scenario() -> None:
        endpoint = _endpoint(HttpLimits(read_timeout_s=10 * IDLE_S))
        transports = [FakeTransport() for _ in range(3)]
        idle, chatty, owing = (endpoint._connection() for _ in range(3))
        for connection, transport in zip((idle, chatty, owing), transports, strict=True):
            connection.connection_made(transport)  # type: ignore[arg-type]
        owing.data_received(get("/never-answered"))
        start = time.monotonic()
        for step in range(1, 25):
            if step % 5 == 0:
                chatty.data_received(b"")  # any read counts as activity
            endpoint._sweep_connections(start + step * IDLE_S / 24)
            assert [t.closed for t in transports] == [step == 24, False, False]

    asyncio.run(scenario())


def test_the_sweep_answers_overdue_requests_408() -> None:
    async def scenario() -> None:
        endpoint = _endpoint(HttpLimits(read_timeout_s=5.0))
        slow, fine = endpoint._connection(), endpoint._connection()
        transports = FakeTransport(), FakeTransport()
        for connection, transport in zip((slow, fine), transports, strict=True):
            connection.connection_made(transport)  # type: ignore[arg-type]
        slow.data_received(b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\nabc")
        endpoint._sweep_connections(time.monotonic() + 4.0)
        assert transports[0].written == b""
        endpoint._sweep_connections(time.monotonic() + 6.0)
        (timed_out,) = parse(transports[0].written)
        assert timed_out.status == 408 and transports[0].closed
        assert transports[1].written == b"" and not transports[1].closed

    asyncio.run(scenario())


def test_connections_past_the_limit_are_answered_503() -> None:
    async def scenario() -> None:
        endpoint = _endpoint(HttpLimits(max_connections=2))
        connections = [endpoint._connection() for _ in range(3)]
        transports = [FakeTransport() for _ in range(3)]
        for connection, transport in zip(connections, transports, strict=True):
            connection.connection_made(transport)  # type: ignore[arg-type]
        connections[2].data_received(get("/v2/health/live"))
        (refused,) = parse(transports[2].written)
        assert refused.status == 503 and refused.headers["retry-after"] == "1"
        assert b"--http-max-connections" in refused.body and transports[2].closed
        connections[2].connection_lost(None)
        connections[0].connection_lost(None)
        replacement = endpoint._connection()  # one slot free again: served
        assert replacement._handler is endpoint._routes

    asyncio.run(scenario())
