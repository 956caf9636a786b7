"""An ASGI application under uvicorn on its own socket: the HTTP front end of
`--http-front-end uvicorn` (the native one is `serve.http.native`). Of the `HttpLimits`, the
body size (`BodyLimit`) and the connection cap (uvicorn's concurrency limit) apply; uvicorn
has no read timeout."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from typing import TYPE_CHECKING

import uvicorn

from serve.http.limits import BodyLimit, HttpLimits
from serve.sockets import LISTEN_BACKLOG, bind_tcp

if TYPE_CHECKING:
    from serve.server_options import EndpointOptions


class _UvicornServer(uvicorn.Server):
    """uvicorn's server without its own signal capture: uvicorn re-raises a captured signal
    after shutdown, which would kill the process before the repository drains and exit 0."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class AsgiEndpoint:
    """An ASGI application under uvicorn (httptools, the running loop) on its own socket."""

    def __init__(
        self,
        name: str,
        app: object,
        options: EndpointOptions,
        log_verbose: int,
        *,
        idle_close_s: float,
        grace_s: float,
        limits: HttpLimits,
    ) -> None:
        self.name = name
        self._options = options
        config = uvicorn.Config(
            BodyLimit(app, limits),
            loop="none",
            http="httptools",
            lifespan="off",
            log_config=None,  # uvicorn's loggers go through the server's (serve.log_settings)
            access_log=log_verbose > 1,
            log_level="info" if log_verbose else "warning",
            timeout_graceful_shutdown=int(grace_s),
            backlog=LISTEN_BACKLOG,
            timeout_keep_alive=int(idle_close_s),
            limit_concurrency=limits.max_connections,  # beyond it: 503
            proxy_headers=False,  # each of these costs CPU on every response
            server_header=False,
            date_header=False,
        )
        self._server = _UvicornServer(config)
        self._socket: socket.socket | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> tuple[str, int]:
        self._socket = bind_tcp(self._options.address, self._options.port)
        self._task = asyncio.create_task(self._server.serve(sockets=[self._socket]))
        while not self._server.started and not self._task.done():
            await asyncio.sleep(0.01)
        if self._task.done():
            self._task.result()  # raises what stopped it
            raise OSError(f"{self.name} stopped while starting")
        host, port = self._socket.getsockname()[:2]
        return host, port

    async def stop(self) -> None:
        self._server.should_exit = True
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task
        if self._socket is not None:
            self._socket.close()
