"""perf_analyzer's `--collect-metrics`: the server's GPU metrics, scraped while measuring.

From the first window on, the Prometheus endpoint (`--metrics-url`, Triton's :8002/metrics)
is read every `--metrics-interval` ms; each window takes the readings made during it (those
between two levels, made while the next one warms up, are dropped), and a measurement merges
the readings of its merged windows per GPU (by UUID): the average of `nv_gpu_utilization` (a
fraction) and `nv_gpu_power_usage` (watts), the maximum of `nv_gpu_memory_used_bytes`, the
first `nv_gpu_memory_total_bytes`. A metric the endpoint lacks (no GPU) is warned about once,
with perf_analyzer's words, and left empty.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import urllib.request
from collections.abc import Awaitable, Callable, Sequence

from prometheus_client.parser import text_string_to_metric_families

from analyzer.measurement import GpuMetrics
from analyzer.profiler.clock import Clock

log = logging.getLogger("analyzer.gpu_metrics")

UTILIZATION = "nv_gpu_utilization"
POWER = "nv_gpu_power_usage"
MEMORY_USED = "nv_gpu_memory_used_bytes"
MEMORY_TOTAL = "nv_gpu_memory_total_bytes"
METRICS = (UTILIZATION, POWER, MEMORY_USED, MEMORY_TOTAL)


def parse_scrape(text: str) -> GpuMetrics:
    """One reading of the endpoint's text."""
    found: dict[str, dict[str, float]] = {name: {} for name in METRICS}
    for family in text_string_to_metric_families(text):
        if family.name not in found:
            continue
        for sample in family.samples:
            uuid = sample.labels.get("gpu_uuid")
            if uuid is not None and sample.name == family.name:
                found[family.name][uuid] = float(sample.value)
    return GpuMetrics(
        utilization=found[UTILIZATION],
        power_w=found[POWER],
        memory_used_bytes={k: int(v) for k, v in found[MEMORY_USED].items()},
        memory_total_bytes={k: int(v) for k, v in found[MEMORY_TOTAL].items()},
    )


def merge_readings(readings: Sequence[GpuMetrics]) -> GpuMetrics:
    """The readings of a measurement's windows as one (see the module docstring)."""

    def average(values: list[dict[str, float]]) -> dict[str, float]:
        uuids = sorted({uuid for reading in values for uuid in reading})
        return {
            uuid: sum(r[uuid] for r in values if uuid in r) / sum(uuid in r for r in values)
            for uuid in uuids
        }

    used: dict[str, int] = {}
    total: dict[str, int] = {}
    for reading in readings:
        for uuid, value in reading.memory_used_bytes.items():
            used[uuid] = max(used.get(uuid, value), value)
        for uuid, value in reading.memory_total_bytes.items():
            total.setdefault(uuid, value)
    return GpuMetrics(
        utilization=average([r.utilization for r in readings]),
        power_w=average([r.power_w for r in readings]),
        memory_used_bytes=used,
        memory_total_bytes=total,
    )


def http_fetcher(url: str, timeout_s: float = 5.0) -> Callable[[], Awaitable[str]]:
    """Reads `url` (host:port/path, as --metrics-url takes it, or a full http:// URL)."""
    full = url if "://" in url else f"http://{url}"

    def read() -> str:
        with urllib.request.urlopen(full, timeout=timeout_s) as response:
            return str(response.read().decode("utf-8", "replace"))

    async def fetch() -> str:
        return await asyncio.to_thread(read)

    return fetch


def server_gpus(url: str, timeout_s: float = 5.0) -> dict[str, int]:
    """The GPUs a server reports on its metrics endpoint (`url` as --metrics-url takes it):
    each GPU's UUID and total memory in bytes (0 where `nv_gpu_memory_total_bytes` is
    missing); empty for a server without GPUs. OSError / ValueError when it cannot be read."""
    full = url if "://" in url else f"http://{url}"
    if not full.rstrip("/").endswith("/metrics"):
        full = full.rstrip("/") + "/metrics"
    with urllib.request.urlopen(full, timeout=timeout_s) as response:
        reading = parse_scrape(response.read().decode("utf-8", "replace"))
    uuids = {*reading.utilization, *reading.memory_total_bytes, *reading.power_w}
    return {uuid: reading.memory_total_bytes.get(uuid, 0) for uuid in sorted(uuids)}


class MetricsPoller:
    """Reads the endpoint every `interval_ms` from `start()` until `stop()`; `take()` hands
    over the readings made since the last call."""

    def __init__(
        self, fetch: Callable[[], Awaitable[str]], interval_ms: int, clock: Clock, url: str = ""
    ) -> None:
        self._fetch, self._interval_s, self._clock, self._url = (
            fetch,
            interval_ms / 1000,
            clock,
            url,
        )
        self._readings: list[GpuMetrics] = []
        self._task: asyncio.Task[None] | None = None
        self._warned = False
        self.error: str | None = None  # why reading stopped, if it did

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def take(self) -> list[GpuMetrics]:
        taken, self._readings = self._readings, []
        return taken

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            began = self._clock.now_ns()
            try:
                reading = parse_scrape(await self._fetch())
            except Exception as exc:  # an unreachable or garbled endpoint ends the readings
                self.error = f"cannot read the metrics at {self._url or 'the metrics URL'}: {exc}"
                return
            self._warn_missing(reading)
            self._readings.append(reading)
            spent_s = (self._clock.now_ns() - began) / 1e9
            await self._clock.sleep(max(0.0, self._interval_s - spent_s))

    def _warn_missing(self, reading: GpuMetrics) -> None:
        if self._warned:
            return
        values = (
            reading.utilization,
            reading.power_w,
            reading.memory_used_bytes,
            reading.memory_total_bytes,
        )
        for name, found in zip(METRICS, values, strict=True):
            if not found:
                log.warning("WARNING: Unable to parse '%s' metric.", name)
                self._warned = True
