"""A front-end process of `autotune serve --workers N`: `python -m serve.workers.front_end
SOCKET INDEX`, started by the core (serve.workers.core).

It connects to the core's Unix socket, takes the server's options, listens on the HTTP and gRPC
ports the core holds (SO_REUSEPORT: the kernel spreads connections over the front ends), and
serves them with the transports of a single-process server over a `RemoteDataPlane`. It stops
when the core says so (answering what is in flight first), on SIGINT / SIGTERM, or when the core
is gone.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from dataclasses import replace
from typing import Any

from common.tied_child import tie_to_parent
from serve.log_settings import LogSettings
from serve.server import Endpoint, build_front_ends, import_front_ends
from serve.server_options import EndpointOptions, ServerOptions
from serve.workers.messages import Listen, Listening, LogUpdate, Stop
from serve.workers.remote import ControlLink, CoreLink, RemoteDataPlane

log = logging.getLogger("serve.workers")


def front_end_options(options: ServerOptions, ports: Listen) -> ServerOptions:
    """The core's options as a front end serves them: HTTP and gRPC on the shared ports, no
    metrics endpoint (the core serves it)."""

    def shared(endpoint: EndpointOptions, port: int | None) -> EndpointOptions:
        if port is None:
            return replace(endpoint, enabled=False)
        return replace(endpoint, port=port, reuse_port=True)

    return replace(
        options,
        http=shared(options.http, ports.http_port),
        grpc=shared(options.grpc, ports.grpc_port),
        metrics=replace(options.metrics, enabled=False),
        notices=[],
    )


async def serve_front_end(path: str, index: int) -> None:
    """Serve as front end `index` of the core listening on `path`, until told to stop."""
    loop = asyncio.get_running_loop()
    orders: asyncio.Queue[Any] = asyncio.Queue()
    logs: LogSettings | None = None

    def on_order(order: Any) -> None:
        if isinstance(order, LogUpdate):
            if logs is not None:
                logs.update(order.update)
        else:
            orders.put_nowait(order)

    _, calls = await loop.create_unix_connection(lambda: CoreLink(index, on_order), path)
    setup = await calls.setup
    options = setup.options
    logs = LogSettings(options.logs)
    logs.install()
    import_front_ends(options)
    control = ControlLink(path, index)
    plane = RemoteDataPlane(calls, control)
    stopped = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopped.set)
    started: list[Endpoint] = []
    grace_s = options.exit_timeout_s
    try:
        ports = await _next_order(orders, calls, stopped)
        if isinstance(ports, Listen):
            for endpoint in build_front_ends(front_end_options(options, ports), plane):
                await endpoint.start()
                started.append(endpoint)
            calls.send(Listening())
            order = await _next_order(orders, calls, stopped)
            while order is not None and not isinstance(order, Stop):
                log.warning("front-end process %d: unexpected %r", index, order)
                order = await _next_order(orders, calls, stopped)
            if isinstance(order, Stop):
                grace_s = order.grace_s
    finally:
        for endpoint in reversed(started):
            try:
                await asyncio.wait_for(endpoint.stop(), grace_s)
            except TimeoutError:
                log.warning("front end %d: requests still in flight at exit", index)
        control.close()
        calls.close()
        calls.close_arena()


async def _next_order(orders: asyncio.Queue[Any], calls: CoreLink, stopped: asyncio.Event) -> Any:
    """The core's next order; None when the core is gone or a signal asks to stop."""
    waits = {
        asyncio.ensure_future(orders.get()),
        asyncio.ensure_future(calls.closed.wait()),
        asyncio.ensure_future(stopped.wait()),
    }
    done, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    for task in done:
        value = task.result()
        if not isinstance(value, bool):
            return value
    log.info(
        "front-end process %d stops: %s",
        calls.index,
        "a signal" if stopped.is_set() else "the core has closed its connection",
    )
    return None


def main(argv: list[str]) -> int:
    """The process's entry: `SOCKET INDEX`; tied to the core, which started it."""
    tie_to_parent()
    import uvloop

    path, index = argv[0], int(argv[1])
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(serve_front_end(path, index))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
