"""`autotune serve` (also `python -m serve`): flag names and defaults follow tritonserver's,
except where noted in the help."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from common.tied_child import tie_to_parent
from serve.errors import ServeError
from serve.grpc.limits import DEFAULT_MAX_CONNECTIONS as DEFAULT_GRPC_CONNECTIONS
from serve.grpc.limits import (
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_MAX_STREAMS,
    GrpcLimits,
)
from serve.http.limits import (
    DEFAULT_MAX_BUFFERED_BYTES,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_INPUT_BYTES,
    DEFAULT_READ_TIMEOUT_S,
    HttpLimits,
)
from serve.log_settings import FORMATS, LogValues
from serve.model.response_cache import parse_cache_config
from serve.repository.discovery import check_config_name
from serve.repository.manager import ControlMode, ModelReading
from serve.restricted import API_GROUPS, RestrictedApis
from serve.scheduler.rate_limiter import ResourceCount
from serve.server import serve_forever
from serve.server_options import EndpointOptions, ServerOptions
from serve.trace.settings import parse_trace_config
from serve.triton_flags import ignored_flag_options, recorded_notices

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


# tritonserver's deprecated flags this server honours: parameter -> (flag, what replaces it)
DEPRECATED_FLAGS: dict[str, tuple[str, str]] = {
    "trace_file": ("--trace-file", "--trace-config triton,file=PATH"),
    "trace_level": ("--trace-level", "--trace-config level=LEVEL"),
    "trace_rate": ("--trace-rate", "--trace-config rate=N"),
    "trace_count": ("--trace-count", "--trace-config count=N"),
    "trace_log_frequency": ("--trace-log-frequency", "--trace-config triton,log-frequency=N"),
    "strict_model_config": ("--strict-model-config", "--disable-auto-complete-config"),
    "response_cache_byte_size": ("--response-cache-byte-size", "--cache-config local,size=N"),
}


def deprecation_notices(context: click.Context) -> list[str]:
    """One line for each deprecated tritonserver flag on the command line (honoured all the
    same), naming what replaces it, as tritonserver warns."""
    given = (click.core.ParameterSource.COMMANDLINE, click.core.ParameterSource.ENVIRONMENT)
    return [
        f"{flag} is deprecated in tritonserver (honoured here): use {replacement}"
        for name, (flag, replacement) in DEPRECATED_FLAGS.items()
        if context.get_parameter_source(name) in given
    ]


def deprecated_trace_flags(
    file: str | None,
    levels: tuple[str, ...],
    rate: int | None,
    count: int | None,
    log_frequency: int | None,
) -> list[str]:
    """tritonserver's deprecated --trace-* flags as the --trace-config values they stand for
    (given before any --trace-config, which then has the last word)."""
    specs = [f"level={level}" for level in levels]
    if file is not None:
        specs.append(f"triton,file={file}")
    if rate is not None:
        specs.append(f"rate={rate}")
    if count is not None:
        specs.append(f"count={count}")
    if log_frequency is not None:
        specs.append(f"triton,log-frequency={log_frequency}")
    return specs


# --backend-config settings this server acts on: backend ("" for every backend) -> settings
HONOURED_BACKEND_SETTINGS: dict[str, frozenset[str]] = {
    "": frozenset({"default-max-batch-size"}),
    "onnxruntime": frozenset({"default-max-batch-size"}),
}


def parse_backend_config(specs: tuple[str, ...]) -> tuple[dict[str, dict[str, str]], list[str]]:
    """tritonserver's --backend-config values ([BACKEND,]SETTING=VALUE): the settings this
    server acts on (backend, "" for every backend -> setting -> value), and one warning for
    each other one; ValueError naming the value when it is no SETTING=VALUE, or a setting
    acted on has a bad value."""
    settings: dict[str, dict[str, str]] = {}
    notices = []
    for spec in specs:
        backend, comma, pair = spec.partition(",")
        if not comma or "=" in backend:
            backend, pair = "", spec
        setting, equals, value = pair.partition("=")
        setting, value = setting.strip(), value.strip()
        if not equals or not setting:
            raise ValueError(
                f"--backend-config '{spec}': expected [BACKEND,]SETTING=VALUE, e.g. "
                "onnxruntime,default-max-batch-size=8"
            )
        if setting in HONOURED_BACKEND_SETTINGS.get(backend, frozenset()):
            if not (value.isascii() and value.isdigit()):
                raise ValueError(f"--backend-config '{spec}': {setting} must be an integer >= 0")
            settings.setdefault(backend, {})[setting] = value
            continue
        where = f"backend '{backend}'" if backend else "every backend"
        notices.append(
            f"--backend-config {spec}: no effect here (setting '{setting}' of {where}; our "
            "backends take their settings from each model's config)"
        )
    return settings, notices


def _apply(flags: list[Any]) -> Any:
    def decorate(function: Any) -> Any:
        for flag in reversed(flags):
            function = flag(function)
        return function

    return decorate


@click.command("serve")
@click.option(
    "--model-repository",
    "--model-store",
    "model_repository",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    required=True,
    multiple=True,
    help="A Triton model repository to serve. Repeatable: the models of every repository are "
    "served; a name found in two of them is an error for that model, as in tritonserver.",
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
@click.option(
    "--http-max-input-size",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_INPUT_BYTES,
    show_default=True,
    help="Largest HTTP request body in bytes; a larger one is answered 413 from its "
    "Content-Length, before it is read.",
)
@click.option(
    "--http-max-buffered-input-size",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_BUFFERED_BYTES,
    show_default=True,
    help="Request bytes held at once across HTTP connections while bodies arrive (per "
    "front-end process with --workers); a request "
    "past it waits, its connection not read, until there is room (at least one request is "
    "always admitted; native front end; not in tritonserver).",
)
@click.option(
    "--http-read-timeout",
    type=click.FloatRange(min=0.1),
    default=DEFAULT_READ_TIMEOUT_S,
    show_default=True,
    help="Seconds a client has to send a whole request once it begins one; then 408 and the "
    "connection closes (native front end; not in tritonserver).",
)
@click.option(
    "--http-max-connections",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_CONNECTIONS,
    show_default=True,
    help="HTTP connections open at once (per front-end process with --workers); the requests "
    "of one more are answered 503 (not in tritonserver).",
)
@click.option(
    "--http-restricted-api",
    "http_restricted_api",
    multiple=True,
    metavar="API[,API...]:KEY=VALUE",
    help="Serve these HTTP APIs only to requests with header KEY: VALUE (others get 403); "
    f"APIs: {', '.join(API_GROUPS)}. Repeatable.",
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
    type=click.IntRange(1024, DEFAULT_MAX_MESSAGE_BYTES),
    default=DEFAULT_MAX_MESSAGE_BYTES,
    show_default=True,
    help="Largest gRPC message received or sent.",
)
@click.option(
    "--grpc-max-concurrent-streams",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_STREAMS,
    show_default=True,
    help="gRPC calls open at once on one connection; clients queue the rest (not in tritonserver).",
)
@click.option(
    "--grpc-max-connections",
    type=click.IntRange(min=1),
    default=DEFAULT_GRPC_CONNECTIONS,
    show_default=True,
    help="gRPC connections open at once (per front-end process with --workers); the calls of "
    "one more fail UNAVAILABLE and it is closed (native front end; not in tritonserver).",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Front-end processes: N > 1 starts N processes that share the HTTP and gRPC ports and "
    "do the protocol work (parsing, decoding, encoding), while this one runs the models, so "
    "that one batch holds requests from all of them; 1: everything in this process "
    "(docs/architecture.md says when more pay). Native front ends only.",
)
@click.option(
    "--grpc-front-end",
    type=click.Choice(["native", "grpcio"]),
    default="native",
    show_default=True,
    help="native: gRPC framed by this server on asyncio (the fast path); grpcio: grpcio's "
    "own server.",
)
@click.option(
    "--grpc-restricted-protocol",
    "grpc_restricted_protocol",
    multiple=True,
    metavar="API[,API...]:KEY=VALUE",
    help="Serve these gRPC APIs only to calls with metadata KEY: VALUE (others get "
    "PERMISSION_DENIED); APIs as for --http-restricted-api. Repeatable.",
)
@_apply(_endpoint_flags("metrics", 8002, "Prometheus metrics (/metrics)"))
@click.option(
    "--allow-cpu-metrics",
    type=click.BOOL,
    default=True,
    show_default=True,
    help="Serve nv_cpu_* metrics (CPU utilization and memory).",
)
@click.option(
    "--allow-gpu-metrics",
    type=click.BOOL,
    default=True,
    show_default=True,
    help="Serve nv_gpu_* metrics where NVML finds a GPU.",
)
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
    "--disable-auto-complete-config",
    is_flag=True,
    default=False,
    help="Take each config as written, as tritonserver does with this flag: it must exist and "
    "name its backend, inputs and outputs (nothing is completed from the model file).",
)
@click.option(
    "--model-load-retry-count",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="How many times a model version that failed to load is tried again.",
)
@click.option(
    "--strict-model-config",
    type=click.BOOL,
    default=None,
    help="Deprecated in tritonserver: true is --disable-auto-complete-config.",
)
@click.option(
    "--model-config-name",
    default="",
    help="A model whose folder holds configs/NAME.pbtxt is served with that config instead "
    "of its config.pbtxt (the others with config.pbtxt), as in tritonserver.",
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
    default=True,
    show_default=True,
    help="Exit (non-zero) when a model fails to load at start, as tritonserver does; false: a "
    "model that fails is UNAVAILABLE with its reason while the others serve.",
)
@click.option(
    "--exit-timeout-secs",
    type=click.IntRange(min=0),
    default=30,
    show_default=True,
    help="Seconds a stop (SIGINT, SIGTERM) waits for requests in flight; then the server "
    "exits anyway (gRPC calls get 10 s at most).",
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
    "--log-file",
    type=click.Path(dir_okay=False, writable=True),
    default="",
    help="Write the log to this file instead of stderr (it cannot be changed through the "
    "logging API, as in tritonserver).",
)
@click.option(
    "--trace-config",
    "trace_config",
    multiple=True,
    metavar="[triton,]KEY=VALUE",
    help="Global trace settings, as tritonserver's: file=PATH and log-frequency=N (triton "
    "mode), level=OFF|TIMESTAMPS|TENSORS, rate=N, count=N. Repeatable. The trace file can only "
    "be set here, not through the trace API.",
)
@click.option(
    "--cache-config",
    "cache_config",
    multiple=True,
    metavar="local,size=BYTES",
    help="The response cache, as tritonserver's: local,size=N keeps up to N bytes of responses "
    "in memory for the models whose config has response_cache { enable: true }. Repeatable.",
)
@click.option(
    "--response-cache-byte-size",
    type=click.IntRange(min=0),
    default=None,
    help="Deprecated in tritonserver: the same as --cache-config local,size=N.",
)
@click.option(
    "--rate-limit",
    type=click.Choice(["off", "execution_count"]),
    default="off",
    show_default=True,
    help="execution_count: an instance executes only while the resources its instance group's "
    "rate_limiter names are free, priorities weighting who gets them (tritonserver's flag).",
)
@click.option(
    "--rate-limit-resource",
    "rate_limit_resources",
    multiple=True,
    metavar="NAME:COUNT[:DEVICE]",
    help="How many of a rate-limiter resource exist (on DEVICE, or on every device); default: "
    "the largest count one instance needs. Repeatable.",
)
@click.option(
    "--trace-file",
    default=None,
    help="Deprecated in tritonserver: the same as --trace-config triton,file=PATH.",
)
@click.option(
    "--trace-level",
    multiple=True,
    help="Deprecated in tritonserver: the same as --trace-config level=LEVEL. Repeatable.",
)
@click.option(
    "--trace-rate",
    type=click.INT,
    default=None,
    help="Deprecated in tritonserver: the same as --trace-config rate=N.",
)
@click.option(
    "--trace-count",
    type=click.INT,
    default=None,
    help="Deprecated in tritonserver: the same as --trace-config count=N.",
)
@click.option(
    "--trace-log-frequency",
    type=click.INT,
    default=None,
    help="Deprecated in tritonserver: the same as --trace-config triton,log-frequency=N.",
)
@click.option(
    "--log-verbose",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="0: info; 1: more; 2: debug and access logs.",
)
@click.option("--log-info", type=click.BOOL, default=True, show_default=True, help="Log infos.")
@click.option(
    "--log-warning", type=click.BOOL, default=True, show_default=True, help="Log warnings."
)
@click.option("--log-error", type=click.BOOL, default=True, show_default=True, help="Log errors.")
@click.option(
    "--log-format",
    type=click.Choice(list(FORMATS)),
    default="default",
    show_default=True,
    help="ISO8601: lines stamped YYYY-MM-DDThh:mm:ss.sssZ in UTC.",
)
@click.option(
    "--backend-config",
    "backend_config",
    multiple=True,
    metavar="[BACKEND,]SETTING=VALUE",
    help="tritonserver's backend settings. default-max-batch-size=N (for every backend, or "
    "onnxruntime's): the max_batch_size a config that leaves it out gets when the model can "
    "batch (default 4; 0: none). Others are logged as without effect. Repeatable.",
)
@_apply(ignored_flag_options())
def serve_command(
    model_repository: tuple[Path, ...],
    allow_http: bool,
    http_port: int,
    http_address: str,
    allow_grpc: bool,
    grpc_port: int,
    grpc_address: str,
    grpc_max_message_bytes: int,
    grpc_max_concurrent_streams: int,
    grpc_max_connections: int,
    workers: int,
    grpc_front_end: str,
    grpc_restricted_protocol: tuple[str, ...],
    http_front_end: str,
    http_max_input_size: int,
    http_max_buffered_input_size: int,
    http_read_timeout: float,
    http_max_connections: int,
    http_restricted_api: tuple[str, ...],
    allow_metrics: bool,
    metrics_port: int,
    metrics_address: str,
    allow_cpu_metrics: bool,
    allow_gpu_metrics: bool,
    server_id: str,
    model_control_mode: str,
    load_models: tuple[str, ...],
    model_config_name: str,
    disable_auto_complete_config: bool,
    model_load_retry_count: int,
    strict_model_config: bool | None,
    repository_poll_secs: float,
    exit_on_error: bool,
    exit_timeout_secs: int,
    strict_readiness: bool,
    log_file: str,
    trace_config: tuple[str, ...],
    cache_config: tuple[str, ...],
    response_cache_byte_size: int | None,
    rate_limit: str,
    rate_limit_resources: tuple[str, ...],
    trace_file: str | None,
    trace_level: tuple[str, ...],
    trace_rate: int | None,
    trace_count: int | None,
    trace_log_frequency: int | None,
    log_verbose: int,
    log_info: bool,
    log_warning: bool,
    log_error: bool,
    log_format: str,
    backend_config: tuple[str, ...],
) -> None:
    """Serve Triton model repositories over KServe v2 HTTP and gRPC, with Prometheus metrics.

    Every other flag of tritonserver 2.51 is accepted too, and named in a warning line when it
    asks for something this server does not do (docs/cli.md lists them)."""
    tie_to_parent()  # a no-op unless a parent asked for it (the tuner, the gate, the tests)
    mode = ControlMode(model_control_mode)
    if load_models and mode != ControlMode.EXPLICIT:
        raise click.UsageError("--load-model needs --model-control-mode explicit")
    if not (allow_http or allow_grpc):
        raise click.UsageError("--allow-http and --allow-grpc are both false: nothing to serve")
    if workers > 1 and (http_front_end, grpc_front_end) != ("native", "native"):
        raise click.UsageError(
            "--workers above 1 needs the native front ends (--http-front-end native,"
            " --grpc-front-end native)"
        )
    try:
        http_restricted = RestrictedApis.parse(http_restricted_api, "--http-restricted-api")
        grpc_restricted = RestrictedApis.parse(
            grpc_restricted_protocol, "--grpc-restricted-protocol"
        )
        check_config_name(model_config_name)
        trace = parse_trace_config(
            [
                *deprecated_trace_flags(
                    trace_file, trace_level, trace_rate, trace_count, trace_log_frequency
                ),
                *trace_config,
            ]
        )
        backend_settings, notices = parse_backend_config(backend_config)
        if response_cache_byte_size is not None:  # the deprecated flag, as tritonserver maps it
            cache_config = (f"local,size={response_cache_byte_size}", *cache_config)
        cache = parse_cache_config(cache_config)
        resources = tuple(ResourceCount.parse(text) for text in rate_limit_resources)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    except ServeError as exc:
        raise click.UsageError(exc.message) from None
    notices += deprecation_notices(click.get_current_context())
    notices += recorded_notices(click.get_current_context())
    options = ServerOptions(
        model_repositories=list(model_repository),
        http=EndpointOptions(allow_http, http_address, http_port),
        grpc=EndpointOptions(allow_grpc, grpc_address, grpc_port),
        metrics=EndpointOptions(allow_metrics, metrics_address, metrics_port),
        cpu_metrics=allow_cpu_metrics,
        gpu_metrics=allow_gpu_metrics,
        grpc_limits=GrpcLimits(
            max_message_bytes=grpc_max_message_bytes,
            max_streams=grpc_max_concurrent_streams,
            max_connections=grpc_max_connections,
        ),
        grpc_front_end=grpc_front_end,
        http_front_end=http_front_end,
        workers=workers,
        http_limits=HttpLimits(
            max_input_bytes=http_max_input_size,
            max_buffered_bytes=http_max_buffered_input_size,
            read_timeout_s=http_read_timeout,
            max_connections=http_max_connections,
        ),
        http_restricted=http_restricted,
        grpc_restricted=grpc_restricted,
        server_id=server_id,
        control_mode=mode,
        load_models=list(load_models),
        poll_seconds=repository_poll_secs,
        reading=ModelReading(
            config_name=model_config_name,
            auto_complete=not (disable_auto_complete_config or strict_model_config),
            backend_settings=backend_settings,
            load_retries=model_load_retry_count,
        ),
        exit_on_error=exit_on_error,
        exit_timeout_s=float(exit_timeout_secs),
        strict_readiness=strict_readiness,
        logs=LogValues(
            log_file=log_file,
            log_info=log_info,
            log_warning=log_warning,
            log_error=log_error,
            log_verbose_level=log_verbose,
            log_format=log_format,
        ),
        trace=trace,
        cache=cache,
        rate_limit=rate_limit,
        rate_limit_resources=resources,
        notices=notices,
    )
    try:
        code = serve_forever(options)
    except OSError as exc:
        raise click.ClickException(f"cannot serve: {exc}") from None
    except ServeError as exc:
        raise click.ClickException(exc.message) from None
    sys.exit(code)
