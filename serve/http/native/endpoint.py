"""A native HTTP endpoint: a listening socket whose connections are `HttpConnection`s, each
request answered by the endpoint's routes (`serve.http.native.routes`)."""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from serve.http.native.asgi_bridge import AsgiBridge
from serve.http.native.protocol import HttpConnection, RequestHandler
from serve.sockets import LISTEN_BACKLOG, bind_tcp

log = logging.getLogger("serve.http")

# Idle connections are looked at this many times per idle limit (one clock read per sweep,
# none per request).
_SWEEPS_PER_LIMIT = 24


class Routes(RequestHandler, Protocol):
    """A request handler whose ASGI bridge the stop waits for."""

    bridge: AsgiBridge


class NativeHttpEndpoint:
    """HTTP/1.1 on `serve.http.native`: KServe v2 (the default front end) or metrics."""

    def __init__(
        self,
        name: str,
        routes: Routes,
        address: str,
        port: int,
        *,
        idle_close_s: float,
        grace_s: float = 30.0,
    ) -> None:
        self.name = name  # as tritonserver logs it: HTTPService, Metrics Service
        self._routes = routes
        self._address = address
        self._port = port
        self._idle_close_s = idle_close_s
        self._grace_s = grace_s
        self._server: asyncio.Server | None = None
        self._connections: dict[HttpConnection, int] = {}  # -> sweeps seen idle in a row
        self._sweep: asyncio.TimerHandle | None = None

    def _connection(self) -> HttpConnection:
        connection = HttpConnection(self._routes, self._forget)
        self._connections[connection] = 0
        return connection

    def _forget(self, connection: HttpConnection) -> None:
        self._connections.pop(connection, None)

    async def start(self) -> tuple[str, int]:
        sock = bind_tcp(self._address, self._port)
        loop = asyncio.get_running_loop()
        try:
            self._server = await loop.create_server(
                self._connection, sock=sock, backlog=LISTEN_BACKLOG
            )
        except BaseException:
            sock.close()
            raise
        self._schedule_sweep()
        host, port = sock.getsockname()[:2]
        return host, port

    async def stop(self) -> None:
        """Stop accepting; answer what each connection owes (up to the grace), then close."""
        if self._sweep is not None:
            self._sweep.cancel()
        if self._server is not None:
            self._server.close()
        connections = list(self._connections)
        await asyncio.gather(*(c.drain_and_close(self._grace_s) for c in connections))
        await self._routes.bridge.wait(self._grace_s)
        if self._server is not None:
            await self._server.wait_closed()

    def _schedule_sweep(self) -> None:
        interval = self._idle_close_s / _SWEEPS_PER_LIMIT
        self._sweep = asyncio.get_running_loop().call_later(interval, self._close_idle)

    def _close_idle(self) -> None:
        """Close connections idle for the whole limit: peers that vanished without closing
        (TCP keepalive finds most of them sooner)."""
        for connection, quiet in list(self._connections.items()):
            if connection.active or not connection.idle:
                connection.active = False
                self._connections[connection] = 0
            elif quiet + 1 >= _SWEEPS_PER_LIMIT:
                connection.close_if_idle()
            else:
                self._connections[connection] = quiet + 1
        self._schedule_sweep()
