"""Server lifecycle: load the repository, start the endpoints (HTTP, gRPC, metrics), drain and
stop on SIGINT / SIGTERM.

The endpoints' modules (the HTTP routes, the gRPC stubs, ...) are imported in a thread while the
models load. Each endpoint is an `Endpoint`: started once the models are loaded, logged as
tritonserver logs it ("Started HTTPService at host:port"; launchers read the bound port from
that line), stopped in reverse order after the signal.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import signal
from collections.abc import AsyncIterator, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from serve.dataplane import DataPlane
from serve.dataplane_api import DataPlaneApi
from serve.http.limits import HttpLimits
from serve.log_settings import LogSettings
from serve.model.response_cache import ResponseCache
from serve.repository.manager import ModelRepository
from serve.scheduler.rate_limiter import RateLimiter
from serve.server_options import EndpointOptions, ServerOptions

if TYPE_CHECKING:
    from serve.http.native.endpoint import Routes
    from serve.workers.core import FrontEnds

ASGIApp = Any

log = logging.getLogger("serve")

# Idle keep-alive connections stay open until the client closes them, as Triton's do. Clients
# pool connections and reuse any idle one without notice: a server-side close that crosses a
# request already on its way resets the connection before the request is read, and libcurl
# (perf_analyzer, tritonclient) cannot replay a POST on a new connection, so the request fails
# ("failed to parse the request JSON buffer: The document is empty"). uvicorn closes after 5 s
# idle by default; a day only bounds peers that vanished without closing, which TCP keepalive
# probes (SO_KEEPALIVE on the listening socket, inherited by every accepted one) find sooner.
# Both HTTP front ends apply it.
KEEP_ALIVE_IDLE_S = 24 * 60 * 60

# How long a stop waits for the requests in flight to be answered (tritonserver's
# --exit-timeout-secs default); ServerOptions.exit_timeout_s sets it.
STOP_GRACE_S = 30


class Endpoint(Protocol):
    """A transport or service on its own port."""

    name: str  # as tritonserver logs it: HTTPService, GRPCInferenceService, Metrics Service

    async def start(self) -> tuple[str, int]:
        """Bind and start serving; returns the bound (host, port)."""
        ...

    async def stop(self) -> None:
        """Stop accepting, answer what is in flight, close."""
        ...


def import_front_ends(options: ServerOptions) -> None:
    """Import the modules of the endpoints the options enable (HTTP routes, gRPC stubs, ...):
    `run_server` does it in a thread while the models load, which takes a good part of the
    start-up off the time to ready."""
    for module in _front_end_modules(options):
        importlib.import_module(module)


def _front_end_modules(options: ServerOptions) -> list[str]:
    modules = []
    if options.http.enabled:
        modules.append("serve.http.app")
        modules.append(
            "serve.http.native.endpoint"
            if options.http_front_end == "native"
            else "serve.http.uvicorn_endpoint"
        )
    if options.grpc.enabled:
        modules.append(
            "serve.grpc.native" if options.grpc_front_end == "native" else "serve.grpc.endpoint"
        )
    if options.metrics.enabled:
        modules += ["serve.metrics.endpoint", "serve.http.native.endpoint"]
    return modules


def build_endpoints(options: ServerOptions, dataplane: DataPlane) -> list[Endpoint]:
    """The endpoints the options enable, in start order."""
    endpoints = build_front_ends(options, dataplane)
    if options.metrics.enabled:
        endpoints.append(build_metrics_endpoint(options, dataplane))
    return endpoints


def build_front_ends(options: ServerOptions, dataplane: DataPlaneApi) -> list[Endpoint]:
    """The HTTP and gRPC endpoints the options enable, over `dataplane` (the core's own, or a
    front-end process's `RemoteDataPlane`)."""
    endpoints: list[Endpoint] = []
    if options.http.enabled:
        from serve.http.app import build_control_plane, build_http_app

        http = options.http
        if options.http_front_end == "native":
            from serve.http.native.routes import NativeRoutes

            control_plane = build_control_plane(dataplane)
            routes = NativeRoutes(dataplane, control_plane, options.http_restricted)
            endpoints.append(
                _native_http(
                    "HTTPService", routes, http, options.http_limits, options.exit_timeout_s
                )
            )
        else:
            from serve.http.access import RestrictedAccess
            from serve.http.uvicorn_endpoint import AsgiEndpoint

            endpoints.append(
                AsgiEndpoint(
                    "HTTPService",
                    RestrictedAccess(build_http_app(dataplane), options.http_restricted),
                    http,
                    options.log_verbose,
                    idle_close_s=KEEP_ALIVE_IDLE_S,
                    grace_s=options.exit_timeout_s,
                    limits=options.http_limits,
                )
            )
    if options.grpc.enabled:
        grpc = options.grpc
        if options.grpc_front_end == "native":
            from serve.grpc.native import NativeGrpcEndpoint

            endpoints.append(
                NativeGrpcEndpoint(
                    dataplane,
                    grpc.address,
                    grpc.port,
                    options.grpc_limits,
                    options.grpc_restricted,
                    reuse_port=grpc.reuse_port,
                )
            )
        else:
            from serve.grpc.endpoint import GrpcEndpoint

            endpoints.append(
                GrpcEndpoint(
                    dataplane,
                    grpc.address,
                    grpc.port,
                    options.grpc_limits,
                    options.grpc_restricted,
                )
            )
    return endpoints


def build_metrics_endpoint(options: ServerOptions, dataplane: DataPlane) -> Endpoint:
    """The Prometheus endpoint over the core's models and metrics."""
    from serve.http.native.routes import AsgiRoutes
    from serve.metrics.endpoint import build_metrics_app

    metrics = build_metrics_app(
        dataplane.repository.loaded,
        dataplane.custom_metrics,
        dataplane.response_cache,
        cpu=options.cpu_metrics,
        gpu=options.gpu_metrics,
    )
    return _native_http(
        "Metrics Service",
        AsgiRoutes(metrics),
        options.metrics,
        HttpLimits(),
        options.exit_timeout_s,
    )


def _native_http(
    name: str,
    routes: Routes,
    options: EndpointOptions,
    limits: HttpLimits,
    grace_s: float = STOP_GRACE_S,
) -> Endpoint:
    from serve.http.native.endpoint import NativeHttpEndpoint

    return NativeHttpEndpoint(
        name,
        routes,
        options.address,
        options.port,
        idle_close_s=KEEP_ALIVE_IDLE_S,
        grace_s=grace_s,
        limits=limits,
        reuse_port=options.reuse_port,
    )


def new_dataplane(options: ServerOptions, logs: LogSettings | None = None) -> DataPlane:
    """The DataPlane `options` describe, over a repository not yet started (nothing is loaded until
    `repository.start`)."""
    repository = ModelRepository(
        options.model_repositories,
        options.control_mode,
        options.poll_seconds,
        options.reading,
    )
    return DataPlane(
        repository,
        server_id=options.server_id,
        strict_readiness=options.strict_readiness,
        log_settings=logs,
        trace_defaults=options.trace,
        response_cache=None if options.cache is None else ResponseCache(options.cache),
        rate_limiter=RateLimiter(options.rate_limit, options.rate_limit_resources),
    )


async def run_server(options: ServerOptions, logs: LogSettings | None = None) -> int:
    """Serve until a signal asks to stop; requests in flight are answered before returning.
    Returns the exit code: 1 when --exit-on-error is true and a model failed to load."""
    dataplane = new_dataplane(options, logs)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    started: list[Endpoint] = []
    front_ends = None
    try:
        loading = asyncio.ensure_future(dataplane.repository.start(options.load_models))
        try:
            if options.workers > 1:
                from serve.workers.core import FrontEnds

                front_ends = FrontEnds(dataplane, options, options.workers)
                await front_ends.open()  # the processes start while the models load
            else:
                await asyncio.to_thread(import_front_ends, options)
        finally:
            failed = await loading
        if failed and options.exit_on_error:
            log.error(
                "failed to load all models (%s); exiting as --exit-on-error is true",
                ", ".join(f"'{name}'" for name in failed),
            )
            return 1
        if front_ends is not None:
            await _start_front_end_processes(front_ends)
            endpoints = (
                [build_metrics_endpoint(options, dataplane)] if options.metrics.enabled else []
            )
        else:
            endpoints = build_endpoints(options, dataplane)
        for endpoint in endpoints:
            host, port = await endpoint.start()
            started.append(endpoint)
            log.info("Started %s at %s:%d", endpoint.name, host, port)
        for transport, restricted in (
            ("HTTP", options.http_restricted),
            ("gRPC", options.grpc_restricted),
        ):
            if restricted:
                log.info("restricted %s APIs: %s", transport, restricted.describe())
        await stop.wait()
    finally:
        dataplane.accepting = False
        if front_ends is not None:
            await front_ends.stop(options.exit_timeout_s)
        await _stop_endpoints(reversed(started), options.exit_timeout_s)
        await dataplane.repository.close()
        dataplane.shm_unregister()  # unmaps every region (the client's objects stay)
        dataplane.tracer.close()  # writes the traces collected and not yet written
        log.info("server stopped")
    return 0


async def _start_front_end_processes(front_ends: FrontEnds) -> None:
    """Have the front-end processes listen; log each endpoint as a single process does."""
    http, grpc = await front_ends.listen()
    for name, address in (("HTTPService", http), ("GRPCInferenceService", grpc)):
        if address is not None:
            log.info("Started %s at %s:%d", name, *address)
    log.info("%d front-end processes serve HTTP and gRPC", front_ends.count)


async def _stop_endpoints(endpoints: Iterable[Endpoint], timeout_s: float) -> None:
    """Stop each endpoint, all within `timeout_s` (tritonserver's --exit-timeout-secs): past
    it, the server exits even with requests in flight."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    for endpoint in endpoints:
        left = max(deadline - asyncio.get_running_loop().time(), 0.0)
        try:
            await asyncio.wait_for(endpoint.stop(), left)
        except TimeoutError:
            log.warning(
                "%s: requests still in flight after the exit timeout (%g s); stopping anyway",
                endpoint.name,
                timeout_s,
            )


@contextlib.asynccontextmanager
async def open_http_app(options: ServerOptions) -> AsyncIterator[ASGIApp]:
    """The ASGI application over the repository, loaded as `run_server` loads it, without a
    socket (to run the routes in-process: an ASGI host, or httpx.ASGITransport); on exit it
    stops accepting inference and unloads every model. Only the repository options are used.
    The app needs no lifespan events."""
    from serve.http.app import build_http_app

    dataplane = new_dataplane(options)
    try:
        await dataplane.repository.start(options.load_models)
        yield build_http_app(dataplane)
    finally:
        dataplane.accepting = False
        await dataplane.repository.close()
        dataplane.shm_unregister()
        dataplane.tracer.close()


def serve_forever(options: ServerOptions) -> int:
    """Run the server on uvloop; the exit code is 0 after a clean stop, 1 when
    --exit-on-error stopped it."""
    import uvloop

    logs = LogSettings(options.logs)
    logs.install()
    for notice in options.notices:
        log.warning("%s", notice)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(run_server(options, logs))
