"""The server's options, as `autotune serve`'s flags set them (serve/cli.py) and the server
runs with them (serve/server.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from serve.grpc.limits import GrpcLimits
from serve.http.limits import HttpLimits
from serve.log_settings import LogValues
from serve.model.response_cache import CacheSettings
from serve.repository.manager import ControlMode, ModelReading
from serve.restricted import RestrictedApis
from serve.scheduler.rate_limiter import ResourceCount
from serve.trace.settings import DEFAULTS, TraceValues


@dataclass(slots=True)
class EndpointOptions:
    """Whether an endpoint (HTTP, gRPC, metrics) is served, and where."""

    enabled: bool
    address: str
    port: int  # 0: a free port (the "Started ..." log line names it)
    reuse_port: bool = False  # shared with the other front-end processes (SO_REUSEPORT)


@dataclass(slots=True)
class ServerOptions:
    """Everything `autotune serve` is started with, as its command line gives it (tritonserver's
    flags where they exist); `serve.server.run_server` serves by them."""

    # tritonserver's --model-repository, repeatable: the models of all of them are served
    model_repositories: list[Path]
    http: EndpointOptions = field(default_factory=lambda: EndpointOptions(True, "127.0.0.1", 8000))
    grpc: EndpointOptions = field(default_factory=lambda: EndpointOptions(True, "127.0.0.1", 8001))
    metrics: EndpointOptions = field(
        default_factory=lambda: EndpointOptions(True, "127.0.0.1", 8002)
    )
    cpu_metrics: bool = True  # nv_cpu_* (tritonserver's --allow-cpu-metrics)
    gpu_metrics: bool = True  # nv_gpu_* where NVML finds a GPU (--allow-gpu-metrics)
    # message size, calls per connection, connections; grpcio's own default receive limit
    # (4 MiB) would refuse a batch of a few images, Triton's clients send up to 2 GiB - 1
    grpc_limits: GrpcLimits = field(default_factory=GrpcLimits)
    # "native": gRPC framed on asyncio (serve.grpc.http2), ~3x grpcio's server here;
    # "grpcio": grpcio's own server (grpc.aio).
    grpc_front_end: str = "native"
    # "native": HTTP/1.1 on asyncio.Protocol + httptools (serve.http.native), the infer route
    # answered from the DataPlane's callback; "uvicorn": the ASGI app under uvicorn.
    http_front_end: str = "native"
    # front-end processes (--workers): 1 serves HTTP and gRPC in the process that runs the
    # models; N > 1 starts N processes that do the protocol work (serve.workers)
    workers: int = 1
    http_limits: HttpLimits = field(
        default_factory=HttpLimits
    )  # request size, read timeout, connections
    # APIs callers reach only with a key (--http-restricted-api, --grpc-restricted-protocol)
    http_restricted: RestrictedApis = field(default_factory=RestrictedApis)
    grpc_restricted: RestrictedApis = field(default_factory=RestrictedApis)
    server_id: str = "autotune"  # the name in server metadata (tritonserver --id)
    control_mode: ControlMode = ControlMode.NONE
    load_models: list[str] = field(default_factory=list)
    poll_seconds: float = 15.0
    # how model folders are read and loaded: --model-config-name,
    # --disable-auto-complete-config, --backend-config, --model-load-retry-count
    reading: ModelReading = field(default_factory=ModelReading)
    exit_on_error: bool = True  # as tritonserver's
    # how long a stop waits for requests in flight (tritonserver's --exit-timeout-secs)
    exit_timeout_s: float = 30.0
    strict_readiness: bool = True
    # --log-file ("": stderr), --log-verbose, --log-info / -warning / -error, --log-format
    logs: LogValues = field(default_factory=LogValues)
    trace: TraceValues = DEFAULTS  # the global trace settings (tritonserver --trace-config)
    cache: CacheSettings | None = None  # the response cache (tritonserver --cache-config)
    rate_limit: str = "off"  # tritonserver --rate-limit: off | execution_count
    rate_limit_resources: tuple[ResourceCount, ...] = ()  # --rate-limit-resource
    # warnings to log at start: tritonserver flags given that have no effect here
    notices: list[str] = field(default_factory=list)

    @property
    def log_verbose(self) -> int:
        return self.logs.log_verbose_level
