"""Host metrics: CPU utilization over the time since the previous scrape, and memory, as
Triton reports them from /proc/stat and /proc/meminfo (read here through psutil)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psutil
from prometheus_client.metrics_core import GaugeMetricFamily, Metric


def _busy_and_total(times: Any) -> tuple[float, float]:
    """Busy and total CPU seconds of a psutil cpu_times() sample, all cores together. Guest
    time is already inside user and nice on Linux, so it is not added twice."""
    total = sum(times) - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)
    idle = times.idle + getattr(times, "iowait", 0.0)
    return total - idle, total


def busy_fraction(before: Any, after: Any) -> float:
    """Share of CPU time spent busy between two cpu_times() samples, 0..1."""
    busy0, total0 = _busy_and_total(before)
    busy1, total1 = _busy_and_total(after)
    elapsed = total1 - total0
    if elapsed <= 0:
        return 0.0
    return min(max((busy1 - busy0) / elapsed, 0.0), 1.0)


class CpuCollector:
    """nv_cpu_utilization (since the previous scrape, or since the collector was made),
    nv_cpu_memory_total_bytes and nv_cpu_memory_used_bytes (total less available)."""

    def __init__(self) -> None:
        self._last = psutil.cpu_times()

    def collect(self) -> Iterator[Metric]:
        now = psutil.cpu_times()
        utilization = busy_fraction(self._last, now)
        self._last = now
        memory = psutil.virtual_memory()
        yield GaugeMetricFamily(
            "nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]", value=utilization
        )
        yield GaugeMetricFamily(
            "nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes", value=memory.total
        )
        yield GaugeMetricFamily(
            "nv_cpu_memory_used_bytes",
            "CPU used memory (RAM), in bytes",
            value=memory.total - memory.available,
        )
