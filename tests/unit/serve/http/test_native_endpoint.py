"""The native HTTP endpoint's sweep of idle connections: one that stays idle for the whole
limit is closed (a peer that vanished), one that reads or owes an answer is kept."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from serve.http.native.endpoint import NativeHttpEndpoint
from serve.http.native.routes import NativeRoutes
from tests.unit.serve.http.test_native_protocol import FakeTransport, get

SWEEPS = 24  # per idle limit


def test_only_connections_idle_for_the_whole_limit_are_closed() -> None:
    async def scenario() -> None:
        dataplane = SimpleNamespace(tracer=SimpleNamespace(active=False))
        endpoint = NativeHttpEndpoint(
            "HTTPService",
            NativeRoutes(dataplane, control_plane=None),  # type: ignore[arg-type]
            address="127.0.0.1",
            port=0,
            idle_close_s=3600.0,
        )
        transports = [FakeTransport() for _ in range(3)]
        idle, chatty, owing = (endpoint._connection() for _ in range(3))
        for connection, transport in zip((idle, chatty, owing), transports, strict=True):
            connection.connection_made(transport)  # type: ignore[arg-type]
        owing.data_received(get("/never-answered"))
        for sweep in range(SWEEPS):
            if sweep % 5 == 0:
                chatty.data_received(b"")  # any read counts as activity
            endpoint._close_idle()
        if endpoint._sweep is not None:
            endpoint._sweep.cancel()
        assert [t.closed for t in transports] == [True, False, False]

    asyncio.run(scenario())
