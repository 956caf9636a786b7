"""`autotune serve` (also `python -m serve`): flag names and defaults follow tritonserver's,
except where noted in the help."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from serve.repository.manager import ControlMode
from serve.server import DEFAULT_GRPC_MESSAGE_BYTES, EndpointOptions, ServerOptions, serve_forever

_PORT = click.IntRange(0, 65535)


def _endpoint_flags(kind: str, port: int, what: str) -> list[Any]:
    return [
        click.option(
            f"--allow-{kind}",
            type=click.BOOL,
            default=True,
            show_default=True,
            help=f"Serve {what}.",
        ),
        click.option(
            f"--{kind}-port",
            type=_PORT,
            default=port,
            show_default=True,
            help=f"{what} port; 0 picks a free one (the 'Started ...' log line names it).",
        ),
    ]


def _apply(flags: list[Any]) -> Any:
    def decorate(function: Any) -> Any:
        for flag in reversed(flags):
            function = flag(function)
        return function

    return decorate


@click.command("serve")
@click.option(
    "--model-repository",
    "model_repository",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    required=True,
    help="The Triton model repository to serve.",
)
@_apply(_endpoint_flags("http", 8000, "KServe v2 HTTP"))
@click.option(
    "--http-address",
    "--host",
    "http_address",
    default="127.0.0.1",
    show_default=True,
    help="Address HTTP binds; loopback unless told otherwise (tritonserver: 0.0.0.0).",
)
@click.option(
    "--http-front-end",
    type=click.Choice(["native", "uvicorn"]),
    default="native",
    show_default=True,
    help="native: HTTP/1.1 served by this server on asyncio and httptools (the fast path); "
    "uvicorn: the ASGI application under uvicorn.",
)
@_apply(_endpoint_flags("grpc", 8001, "KServe v2 gRPC"))
@click.option(
    "--grpc-address",
    default="127.0.0.1",
    show_default=True,
    help="Address gRPC binds; loopback unless told otherwise (tritonserver: 0.0.0.0).",
)
@click.option(
    "--grpc-max-message-bytes",
    type=click.IntRange(1024, DEFAULT_GRPC_MESSAGE_BYTES),
    default=DEFAULT_GRPC_MESSAGE_BYTES,
    show_default=True,
    help="Largest gRPC message received or sent.",
)
@click.option(
    "--grpc-front-end",
    type=click.Choice(["native", "grpcio"]),
    default="native",
    show_default=True,
    help="native: gRPC framed by this server on asyncio (the fast path); grpcio: grpcio's "
    "own server.",
)
@_apply(_endpoint_flags("metrics", 8002, "Prometheus metrics (/metrics)"))
@click.option(
    "--metrics-address",
    default="127.0.0.1",
    show_default=True,
    help="Address the metrics endpoint binds.",
)
@click.option(
    "--id",
    "server_id",
    default="autotune",
    show_default=True,
    help="The server's name in server metadata.",
)
@click.option(
    "--model-control-mode",
    type=click.Choice([m.value for m in ControlMode]),
    default="none",
    show_default=True,
    help="none: load all at start; explicit: load through the repository API; poll: follow "
    "changes on disk.",
)
@click.option(
    "--load-model",
    "load_models",
    multiple=True,
    help="With explicit control: a model to load at start ('*' for all).",
)
@click.option(
    "--repository-poll-secs",
    type=click.FloatRange(min=0.1),
    default=15.0,
    show_default=True,
    help="Polling interval with --model-control-mode poll.",
)
@click.option(
    "--exit-on-error",
    type=click.BOOL,
    default=False,
    show_default=True,
    help="Exit (non-zero) when a model fails to load at start. Default false, unlike "
    "tritonserver: a model that fails is UNAVAILABLE with its reason while the others serve.",
)
@click.option(
    "--strict-readiness",
    type=click.BOOL,
    default=True,
    show_default=True,
    help="true: ready only while every model that should be loaded is ready; false: ready "
    "while the server is live.",
)
@click.option(
    "--log-verbose",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="0: info; 1: more; 2: debug and access logs.",
)
def serve_command(
    model_repository: Path,
    allow_http: bool,
    http_port: int,
    http_address: str,
    allow_grpc: bool,
    grpc_port: int,
    grpc_address: str,
    grpc_max_message_bytes: int,
    grpc_front_end: str,
    http_front_end: str,
    allow_metrics: bool,
    metrics_port: int,
    metrics_address: str,
    server_id: str,
    model_control_mode: str,
    load_models: tuple[str, ...],
    repository_poll_secs: float,
    exit_on_error: bool,
    strict_readiness: bool,
    log_verbose: int,
) -> None:
    """Serve a Triton model repository over KServe v2 HTTP and gRPC, with Prometheus metrics."""
    mode = ControlMode(model_control_mode)
    if load_models and mode != ControlMode.EXPLICIT:
        raise click.UsageError("--load-model needs --model-control-mode explicit")
    if not (allow_http or allow_grpc):
        raise click.UsageError("--allow-http and --allow-grpc are both false: nothing to serve")
    options = ServerOptions(
        model_repository=model_repository,
        http=EndpointOptions(allow_http, http_address, http_port),
        grpc=EndpointOptions(allow_grpc, grpc_address, grpc_port),
        metrics=EndpointOptions(allow_metrics, metrics_address, metrics_port),
        grpc_max_message_bytes=grpc_max_message_bytes,
        grpc_front_end=grpc_front_end,
        http_front_end=http_front_end,
        server_id=server_id,
        control_mode=mode,
        load_models=list(load_models),
        poll_seconds=repository_poll_secs,
        exit_on_error=exit_on_error,
        strict_readiness=strict_readiness,
        log_verbose=log_verbose,
    )
    try:
        code = serve_forever(options)
    except OSError as exc:
        raise click.ClickException(f"cannot serve: {exc}") from None
    sys.exit(code)
