"""tritonserver's flags that `autotune serve` accepts without acting on them.

A script written for tritonserver 2.51 starts this server unchanged: every flag of
`tritonserver --help` is either honoured (serve/cli.py declares it as an option of its own) or
listed here. A flag listed here is parsed as tritonserver parses it (a bad value is still a
usage error naming the flag) and, when given with a value that would change anything, the
server logs one warning line naming it and why it has no effect here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

# the key in click's context.meta under which the warnings of one command line are collected
NOTICES_KEY = "serve.triton_flags.notices"

_NO_GPU = "GPU memory and devices are managed by the backends' own runtimes here"
_ONE_FRONT_END = "asyncio front ends serve HTTP here, no thread pool; --workers N: processes"


@dataclass(frozen=True, slots=True)
class IgnoredFlag:
    """A tritonserver flag taken and left without effect."""

    name: str  # as on tritonserver's command line, e.g. "--http-thread-count"
    kind: click.ParamType | None  # the value's type; None: a switch without a value
    why: str  # what a user should know instead, in a few words
    multiple: bool = False
    # values that ask for what this server does anyway: given with one, nothing is logged
    same_as_ours: tuple[Any, ...] = ()


_INT = click.INT
_BOOL = click.BOOL
_STR = click.STRING
_FLOAT = click.FLOAT

IGNORED_FLAGS: tuple[IgnoredFlag, ...] = (
    # Model repository
    IgnoredFlag(
        "--model-load-thread-count",
        _INT,
        "models load concurrently on the server's event loop, their files read in threads",
    ),
    IgnoredFlag(
        "--model-namespacing",
        _BOOL,
        "a model name is one model across all repositories",
        same_as_ours=(False,),
    ),
    IgnoredFlag("--enable-peer-access", _BOOL, _NO_GPU, same_as_ours=(True,)),
    # HTTP
    IgnoredFlag("--reuse-http-port", _BOOL, "the HTTP port is not shared", same_as_ours=(False,)),
    IgnoredFlag(
        "--http-header-forward-pattern", _STR, "HTTP headers are not forwarded as parameters"
    ),
    IgnoredFlag("--http-thread-count", _INT, _ONE_FRONT_END),
    # gRPC
    IgnoredFlag("--reuse-grpc-port", _BOOL, "the gRPC port is not shared", same_as_ours=(False,)),
    IgnoredFlag(
        "--grpc-header-forward-pattern", _STR, "gRPC metadata is not forwarded as parameters"
    ),
    IgnoredFlag(
        "--grpc-infer-allocation-pool-size",
        _INT,
        "request and response objects are not pooled here",
    ),
    IgnoredFlag(
        "--grpc-use-ssl", _BOOL, "gRPC is served without TLS (plaintext)", same_as_ours=(False,)
    ),
    IgnoredFlag(
        "--grpc-use-ssl-mutual",
        _BOOL,
        "gRPC is served without TLS (plaintext)",
        same_as_ours=(False,),
    ),
    IgnoredFlag("--grpc-server-cert", _STR, "gRPC is served without TLS (plaintext)"),
    IgnoredFlag("--grpc-server-key", _STR, "gRPC is served without TLS (plaintext)"),
    IgnoredFlag("--grpc-root-cert", _STR, "gRPC is served without TLS (plaintext)"),
    IgnoredFlag(
        "--grpc-infer-response-compression-level",
        click.Choice(["none", "low", "medium", "high"], case_sensitive=False),
        "gRPC answers are sent uncompressed",
        same_as_ours=("none",),
    ),
    IgnoredFlag("--grpc-keepalive-time", _INT, "the gRPC server sends no keepalive pings"),
    IgnoredFlag("--grpc-keepalive-timeout", _INT, "the gRPC server sends no keepalive pings"),
    IgnoredFlag(
        "--grpc-keepalive-permit-without-calls",
        _BOOL,
        "clients' pings are answered whenever they come",
    ),
    IgnoredFlag(
        "--grpc-http2-max-pings-without-data",
        _INT,
        "the gRPC server sends no keepalive pings",
    ),
    IgnoredFlag(
        "--grpc-http2-min-recv-ping-interval-without-data",
        _INT,
        "clients' pings are answered whenever they come",
    ),
    IgnoredFlag(
        "--grpc-http2-max-ping-strikes", _INT, "clients' pings are answered whenever they come"
    ),
    IgnoredFlag("--grpc-max-connection-age", _INT, "gRPC connections have no maximum age"),
    IgnoredFlag("--grpc-max-connection-age-grace", _INT, "gRPC connections have no maximum age"),
    # SageMaker and Vertex AI
    IgnoredFlag(
        "--allow-sagemaker", _BOOL, "no SageMaker endpoint is served", same_as_ours=(False,)
    ),
    IgnoredFlag("--sagemaker-port", _INT, "no SageMaker endpoint is served"),
    IgnoredFlag("--sagemaker-safe-port-range", _STR, "no SageMaker endpoint is served"),
    IgnoredFlag("--sagemaker-thread-count", _INT, "no SageMaker endpoint is served"),
    IgnoredFlag(
        "--allow-vertex-ai", _BOOL, "no Vertex AI endpoint is served", same_as_ours=(False,)
    ),
    IgnoredFlag("--vertex-ai-port", _INT, "no Vertex AI endpoint is served"),
    IgnoredFlag("--vertex-ai-thread-count", _INT, "no Vertex AI endpoint is served"),
    IgnoredFlag("--vertex-ai-default-model", _STR, "no Vertex AI endpoint is served"),
    # Metrics
    IgnoredFlag(
        "--metrics-interval-ms", _FLOAT, "metrics are read when /metrics is scraped, not polled"
    ),
    IgnoredFlag(
        "--metrics-config", _STR, "the metrics' labels and buckets are fixed", multiple=True
    ),
    # Backends, repository agents, caches
    IgnoredFlag("--backend-directory", _STR, "the backends are part of this server"),
    IgnoredFlag("--repoagent-directory", _STR, "no repository agents run here"),
    IgnoredFlag(
        "--cache-directory",
        _STR,
        "the local response cache is built in: no cache library is loaded",
    ),
    # Memory and devices
    IgnoredFlag(
        "--pinned-memory-pool-byte-size",
        _INT,
        "tensors are staged in ordinary or shared memory; no pinned pool",
    ),
    IgnoredFlag("--cuda-memory-pool-byte-size", _STR, _NO_GPU, multiple=True),
    IgnoredFlag("--cuda-virtual-address-size", _STR, _NO_GPU, multiple=True),
    IgnoredFlag("--min-supported-compute-capability", _FLOAT, _NO_GPU),
    IgnoredFlag(
        "--buffer-manager-thread-count",
        _INT,
        "tensor copies run on the thread that needs them",
        same_as_ours=(0,),
    ),
    IgnoredFlag(
        "--host-policy", _STR, "instances are not pinned to NUMA nodes or cores", multiple=True
    ),
    IgnoredFlag("--model-load-gpu-limit", _STR, _NO_GPU, multiple=True),
)


def _given(value: Any) -> list[Any]:
    if isinstance(value, tuple):
        return list(value)
    return [] if value is None else [value]


def _recorder(flag: IgnoredFlag) -> Callable[[click.Context, click.Parameter, Any], None]:
    def record(context: click.Context, parameter: click.Parameter, value: Any) -> None:
        changes = [v for v in _given(value) if v not in flag.same_as_ours]
        if flag.kind is None:
            changes = [True] if value else []
        if not changes:
            return
        shown = ", ".join(f"{flag.name} {v}" if flag.kind else flag.name for v in changes)
        notices: list[str] = context.meta.setdefault(NOTICES_KEY, [])
        notices.append(f"{shown}: no effect here ({flag.why})")

    return record


def ignored_flag_options() -> list[Callable[[Any], Any]]:
    """click options for every flag of IGNORED_FLAGS, hidden from --help's list (docs/cli.md
    has them); each records its warning in the context's meta under NOTICES_KEY."""
    options = []
    for flag in IGNORED_FLAGS:
        dest = "ignored_" + flag.name.removeprefix("--").replace("-", "_")
        common: dict[str, Any] = {
            "expose_value": False,
            "hidden": True,
            "callback": _recorder(flag),
        }
        if flag.kind is None:
            options.append(click.option(flag.name, dest, is_flag=True, default=False, **common))
        else:
            options.append(
                click.option(
                    flag.name,
                    dest,
                    type=flag.kind,
                    multiple=flag.multiple,
                    default=() if flag.multiple else None,
                    **common,
                )
            )
    return options


def recorded_notices(context: click.Context) -> list[str]:
    """The warnings the ignored flags of this command line recorded, in command-line order
    of declaration."""
    notices: list[str] = context.meta.get(NOTICES_KEY, [])
    return list(notices)
