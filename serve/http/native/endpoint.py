"""A native HTTP endpoint: a listening socket whose connections are `HttpConnection`s, each
request answered by the endpoint's routes (`serve.http.native.routes`).

A sweep looks at every connection a few dozen times per read timeout: it answers 408 to a
request not received whole in time, and closes a connection idle for the idle limit. Past
`HttpLimits.max_connections`, a new connection's requests are answered 503. The request bodies
being received share one `BodyBudget` (`HttpLimits.max_buffered_bytes`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

from serve.http.codec import encode_error
from serve.http.limits import DEFAULT_LIMITS, HttpLimits
from serve.http.native.asgi_bridge import AsgiBridge
from serve.http.native.budget import BodyBudget
from serve.http.native.protocol import HttpConnection, HttpRequest, RequestHandler, ResponseSlot
from serve.sockets import LISTEN_BACKLOG, bind_tcp

log = logging.getLogger("serve.http")

# The sweep runs this many times per read timeout or idle limit, whichever is shorter (one
# clock read per sweep and per request).
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
        limits: HttpLimits = DEFAULT_LIMITS,
        reuse_port: bool = False,
    ) -> None:
        self.name = name  # as tritonserver logs it: HTTPService, Metrics Service
        self._routes = routes
        self._address = address
        self._port = port
        self._reuse_port = reuse_port
        self._idle_close_s = idle_close_s
        self._grace_s = grace_s
        self._limits = limits
        self._refusing = _Refusing(limits.too_many_connections())
        self._budget = BodyBudget(max(limits.max_buffered_bytes, limits.max_input_bytes))
        self._server: asyncio.Server | None = None
        # each connection -> when it was last seen doing something (monotonic seconds)
        self._connections: dict[HttpConnection, float] = {}
        self._sweep: asyncio.TimerHandle | None = None

    def _connection(self) -> HttpConnection:
        handler: RequestHandler = self._routes
        if len(self._connections) >= self._limits.max_connections:
            handler = self._refusing
        connection = HttpConnection(handler, self._forget, limits=self._limits, budget=self._budget)
        self._connections[connection] = time.monotonic()
        return connection

    def _forget(self, connection: HttpConnection) -> None:
        self._connections.pop(connection, None)

    async def start(self) -> tuple[str, int]:
        sock = bind_tcp(self._address, self._port, reuse_port=self._reuse_port)
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
        shortest = min(self._idle_close_s, self._limits.read_timeout_s)
        self._sweep = asyncio.get_running_loop().call_later(
            shortest / _SWEEPS_PER_LIMIT, self._sweep_connections
        )

    def _sweep_connections(self, now: float | None = None) -> None:
        """Answer 408 to requests overdue; close connections idle for the whole idle limit:
        peers that vanished without closing (TCP keepalive finds most of them sooner)."""
        now = time.monotonic() if now is None else now
        for connection, seen in list(self._connections.items()):
            if connection.read_overdue(now):
                connection.read_timed_out()
            elif connection.active or not connection.idle:
                connection.active = False
                self._connections[connection] = now
            elif now - seen >= self._idle_close_s:
                connection.close_if_idle()
        self._schedule_sweep()


class _Refusing:
    """The handler of connections past the limit: every request answered 503, then closed."""

    timing = False

    def __init__(self, message: str) -> None:
        self._body = encode_error(message)

    def handle(self, request: HttpRequest, slot: ResponseSlot) -> None:
        slot.close = True
        slot.send(503, b"content-type: application/json\r\nretry-after: 1\r\n", self._body)
