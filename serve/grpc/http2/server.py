"""A listening socket whose connections speak gRPC over HTTP/2 (see `connection`)."""

from __future__ import annotations

import asyncio
import socket

from serve.grpc.http2.calls import Router
from serve.grpc.http2.connection import GrpcConnection
from serve.grpc.limits import GrpcLimits
from serve.sockets import LISTEN_BACKLOG


class Http2GrpcServer:
    """Accepts connections on the socket it is given and runs each as a `GrpcConnection`. A
    connection past `limits.max_connections` is still accepted, to answer its calls UNAVAILABLE
    naming the limit, then closed."""

    def __init__(self, router: Router, limits: GrpcLimits) -> None:
        self._router = router
        self._limits = limits
        self._server: asyncio.Server | None = None
        self._connections: set[GrpcConnection] = set()

    def _connection(self) -> GrpcConnection:
        over = len(self._connections) >= self._limits.max_connections
        connection = GrpcConnection(
            self._router,
            self._limits.max_message_bytes,
            self._connections.discard,
            max_streams=self._limits.max_streams,
            refusal=self._limits.too_many_connections() if over else "",
        )
        self._connections.add(connection)
        return connection

    async def start(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self._connection, sock=sock, backlog=LISTEN_BACKLOG)

    async def stop(self, grace_s: float) -> None:
        """Stop accepting; each connection gets GOAWAY and answers its calls in flight."""
        if self._server is not None:
            self._server.close()
        await asyncio.gather(*(c.drain_and_close(grace_s) for c in list(self._connections)))
        if self._server is not None:
            await self._server.wait_closed()
