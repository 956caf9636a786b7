"""The metrics endpoint: an ASGI application answering GET /metrics in Prometheus text."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client.registry import CollectorRegistry

from serve.custom_metrics import CustomMetrics
from serve.metrics.cache import CacheCollector
from serve.metrics.custom import CustomMetricsCollector
from serve.metrics.exposition import CONTENT_TYPE, render
from serve.metrics.gpu import open_gpu_collector
from serve.metrics.inference import InferenceCollector, ModelSource
from serve.metrics.system import CpuCollector
from serve.model.response_cache import ResponseCache

METRICS_PATH = "/metrics"


class MetricsApp:
    """Collects at each scrape, on the event loop's thread (where the statistics change)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        headers: list[tuple[bytes, bytes]] = [(b"content-type", b"text/plain; charset=utf-8")]
        if scope["path"] != METRICS_PATH:
            status, body = 404, f"not found; metrics are at {METRICS_PATH}\n".encode()
        elif scope["method"] not in ("GET", "HEAD"):
            status, body = 405, b"method not allowed; use GET\n"
            headers.append((b"allow", b"GET, HEAD"))
        else:
            status, body = 200, render(self.registry.collect())
            headers = [(b"content-type", CONTENT_TYPE.encode())]
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send(
            {"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body}
        )


def build_metrics_app(
    models: Callable[[], Iterable[ModelSource]],
    custom: CustomMetrics | None = None,
    cache: ResponseCache | None = None,
    *,
    cpu: bool = True,
    gpu: bool = True,
) -> MetricsApp:
    """Inference metrics over the loaded model versions `models()` returns, the response
    cache's when there is one, CPU metrics (unless `cpu` is false), GPU metrics when NVML
    finds a GPU (unless `gpu` is false), and the custom metrics python models define, after
    them."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(InferenceCollector(models))
    if cache is not None:
        registry.register(CacheCollector(cache))
    if cpu:
        registry.register(CpuCollector())
    gpus = open_gpu_collector() if gpu else None
    if gpus is not None:
        registry.register(gpus)
    if custom is not None:
        registry.register(CustomMetricsCollector(custom))
    return MetricsApp(registry)
