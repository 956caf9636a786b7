"""Server lifecycle: load the repository, serve HTTP, drain and stop on SIGINT / SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import uvicorn

from serve.dataplane import DataPlane
from serve.http.app import build_http_app
from serve.http.infer_route import InferRoute
from serve.repository.manager import ControlMode, ModelRepository

log = logging.getLogger("serve")

# Idle keep-alive connections stay open until the client closes them, as Triton's do. Clients
# pool connections and reuse any idle one without notice: a server-side close that crosses a
# request already on its way resets the connection before the request is read, and libcurl
# (perf_analyzer, tritonclient) cannot replay a POST on a new connection, so the request fails
# ("failed to parse the request JSON buffer: The document is empty"). uvicorn closes after 5 s
# idle by default; a day only bounds peers that vanished without closing, which TCP keepalive
# probes (SO_KEEPALIVE on the listening socket, inherited by every accepted one) find sooner.
KEEP_ALIVE_IDLE_S = 24 * 60 * 60


@dataclass(slots=True)
class ServerOptions:
    model_repository: Path
    host: str = "127.0.0.1"
    http_port: int = 8000
    control_mode: ControlMode = ControlMode.NONE
    load_models: list[str] = field(default_factory=list)
    poll_seconds: float = 15.0
    log_verbose: int = 0


class _HttpServer(uvicorn.Server):
    """uvicorn's server without its own signal capture: uvicorn re-raises a captured signal
    after shutdown, which would kill the process before the repository drains and exit 0."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    def request_stop(self) -> None:
        if self.should_exit:
            self.force_exit = True
        self.should_exit = True


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


async def run_server(options: ServerOptions) -> None:
    """Serve until a signal asks to stop; requests in flight are answered before returning."""
    repository = ModelRepository(
        options.model_repository, options.control_mode, options.poll_seconds
    )
    dataplane = DataPlane(repository)
    config = uvicorn.Config(
        build_http_app(dataplane),
        loop="none",
        http="httptools",
        lifespan="off",
        access_log=options.log_verbose > 1,
        log_level="info" if options.log_verbose else "warning",
        timeout_graceful_shutdown=30,
        timeout_keep_alive=KEEP_ALIVE_IDLE_S,
        proxy_headers=False,  # each of these costs CPU on every response
        server_header=False,
        date_header=False,
    )
    server = _HttpServer(config)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, server.request_stop)
    sock = _bind(options.host, options.http_port)
    try:
        await repository.start(options.load_models)
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started and not serving.done():
            await asyncio.sleep(0.01)
        if server.started:
            host, port = sock.getsockname()[:2]
            log.info("Started HTTPService at %s:%d", host, port)
        await serving
    finally:
        dataplane.accepting = False
        await repository.close()
        sock.close()
        log.info("server stopped")


@contextlib.asynccontextmanager
async def open_http_app(options: ServerOptions) -> AsyncIterator[InferRoute]:
    """The ASGI application over the repository, loaded as `run_server` loads it, without a
    socket (to run the routes in-process: an ASGI host, or httpx.ASGITransport); on exit it
    stops accepting inference and unloads every model. `host`, `http_port` and `log_verbose`
    are not used. The app needs no lifespan events."""
    repository = ModelRepository(
        options.model_repository, options.control_mode, options.poll_seconds
    )
    dataplane = DataPlane(repository)
    try:
        await repository.start(options.load_models)
        yield build_http_app(dataplane)
    finally:
        dataplane.accepting = False
        await repository.close()


def configure_logging(verbose: int) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose > 1 else logging.INFO,
        format="%(asctime)s %(levelname).1s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def serve_forever(options: ServerOptions) -> int:
    """Run the server on uvloop; the exit code is 0 after a clean stop."""
    import uvloop

    configure_logging(options.log_verbose)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(run_server(options))
    return 0
