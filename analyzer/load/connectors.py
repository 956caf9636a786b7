"""How a load driver opens its connections, per transport: HTTP/1.1 keep-alive connections,
gRPC unary calls on one channel, or one gRPC stream per connection.

A connection (`InferConnection`, `UnaryCaller`, `StreamCaller`) carries one request at a time
and reports each through the driver's callback; the connector makes them, connects them and
releases what they share.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Any, Protocol

import grpc

from common.invariant import InvariantError
from protocol.client.grpc_infer import (
    Metadata,
    StreamCaller,
    UnaryCaller,
    open_channel,
    wait_connected,
)
from protocol.client.http import Endpoint, connect_error_reason
from protocol.client.infer_connection import InferConnection, RawRecord

HTTP = "http"
GRPC = "grpc"
GRPC_STREAM = "grpc_stream"
TRANSPORTS = (HTTP, GRPC, GRPC_STREAM)
GRPC_CONNECT_TIMEOUT_S = 10.0

OnDone = Callable[[Any, RawRecord], None]


class Connection(Protocol):
    """What the driver needs of a connection. `was_open` is False after a failed connect or
    a call failed in transit: the driver then backs off instead of reopening at once."""

    was_open: bool

    @property
    def closed(self) -> bool: ...
    def send(self, request: bytes) -> None: ...
    def close(self, reason: str = "") -> None: ...
    def connect_failed(self, reason: str) -> None: ...


class Connector(Protocol):
    """Makes a transport's connections (`new`), connects them, and releases what they
    share (`close`) once the driver is done."""

    def new(self, on_done: OnDone) -> Connection: ...
    async def connect(self, connection: Connection) -> None: ...
    async def close(self) -> None: ...


class HttpConnector:
    """One HTTP/1.1 keep-alive connection per `InferConnection`; nothing shared."""

    def __init__(self, endpoint: Endpoint) -> None:
        self._endpoint = endpoint

    def new(self, on_done: OnDone) -> Connection:
        return InferConnection(self._endpoint.address, on_done)

    async def connect(self, connection: Connection) -> None:
        if not isinstance(connection, InferConnection):
            raise InvariantError("this connector connects the connections it made")
        loop = asyncio.get_running_loop()
        try:
            await loop.create_connection(
                lambda: connection, self._endpoint.host, self._endpoint.port
            )
        except OSError as exc:
            connection.connect_failed(connect_error_reason(exc))

    async def close(self) -> None:
        return None


class GrpcConnector:
    """Every call (or stream) shares one channel: HTTP/2 carries them side by side."""

    def __init__(self, endpoint: Endpoint, metadata: Metadata, streaming: bool) -> None:
        self._address = endpoint.address
        self._metadata = metadata
        self._streaming = streaming
        self._channel: grpc.aio.Channel | None = None
        self._stream_ids = itertools.count(1)

    def new(self, on_done: OnDone) -> Connection:
        channel = self._open()
        if self._streaming:
            return StreamCaller(
                self._address, channel, self._metadata, on_done, next(self._stream_ids)
            )
        return UnaryCaller(self._address, channel, self._metadata, on_done)

    async def connect(self, connection: Connection) -> None:
        reason = await wait_connected(self._open(), GRPC_CONNECT_TIMEOUT_S)
        if reason:
            connection.connect_failed(reason)

    async def close(self) -> None:
        channel, self._channel = self._channel, None
        if channel is not None:
            await channel.close()

    def _open(self) -> grpc.aio.Channel:
        if self._channel is None:
            self._channel = open_channel(self._address)
        return self._channel


def make_connector(transport: str, endpoint: Endpoint, metadata: Metadata = ()) -> Connector:
    """The connector of `transport` (http, grpc or grpc_stream); ValueError for another."""
    if transport == HTTP:
        return HttpConnector(endpoint)
    if transport in (GRPC, GRPC_STREAM):
        return GrpcConnector(endpoint, metadata, streaming=transport == GRPC_STREAM)
    raise ValueError(f"unknown transport '{transport}' (one of {', '.join(TRANSPORTS)})")
