"""`autotune serve` (also `python -m serve`): flag names follow tritonserver's."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from serve.repository.manager import ControlMode
from serve.server import ServerOptions, serve_forever


@click.command("serve")
@click.option(
    "--model-repository",
    "model_repository",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    required=True,
    help="The Triton model repository to serve.",
)
@click.option(
    "--http-port",
    type=click.IntRange(0, 65535),
    default=8000,
    show_default=True,
    help="HTTP port; 0 picks a free one (the 'Started HTTPService at' log line names it).",
)
@click.option(
    "--host",
    "--http-address",
    "host",
    default="127.0.0.1",
    show_default=True,
    help="Address to bind; loopback unless told otherwise.",
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
    "--log-verbose",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="0: info; 1: more; 2: debug and access logs.",
)
def serve_command(
    model_repository: Path,
    http_port: int,
    host: str,
    model_control_mode: str,
    load_models: tuple[str, ...],
    repository_poll_secs: float,
    log_verbose: int,
) -> None:
    """Serve a Triton model repository over KServe v2 HTTP."""
    mode = ControlMode(model_control_mode)
    if load_models and mode != ControlMode.EXPLICIT:
        raise click.UsageError("--load-model needs --model-control-mode explicit")
    options = ServerOptions(
        model_repository=model_repository,
        host=host,
        http_port=http_port,
        control_mode=mode,
        load_models=list(load_models),
        poll_seconds=repository_poll_secs,
        log_verbose=log_verbose,
    )
    try:
        code = serve_forever(options)
    except OSError as exc:
        raise click.ClickException(f"cannot serve on {host}:{http_port}: {exc}") from None
    sys.exit(code)
