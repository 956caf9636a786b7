"""One measurement window: the requests that completed in it and the state at its end."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from analyzer.load.base import RequestRecord, ScheduleProgress
from analyzer.measurement import GpuMetrics
from analyzer.profiler.percentiles import percentile_of_sorted
from analyzer.profiler.server_stats import ServerCounters


@dataclass(slots=True)
class Window:
    """Requests are assigned to the window in which they ENDED (perf_analyzer's rule)."""

    start_ns: int
    end_ns: int
    ok: list[RequestRecord] = field(default_factory=list)
    failed: list[RequestRecord] = field(default_factory=list)
    counters_end: ServerCounters | None = None  # server counters sampled at end_ns
    in_flight_start: int = 0
    in_flight_end: int = 0
    busy_pct: float = 0.0  # client overhead in this window
    sent: int = 0  # requests sent in the window (completed + growth of in-flight)
    # request-rate mode: the driver's count of sends in the window, and of the late ones
    schedule: ScheduleProgress = field(default_factory=ScheduleProgress)
    gpu_readings: list[GpuMetrics] = field(default_factory=list)  # --collect-metrics
    _sorted_latencies: list[int] | None = None

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9

    @property
    def request_count(self) -> int:
        return len(self.ok)

    def throughput(self, batch_size: int) -> float:
        """Inferences per second (successful requests x batch size / window time)."""
        if self.duration_s <= 0:
            return 0.0
        return len(self.ok) * batch_size / self.duration_s

    def sorted_latencies(self) -> list[int]:
        if self._sorted_latencies is None:
            self._sorted_latencies = sorted(r.latency_ns for r in self.ok)
        return self._sorted_latencies

    def stabilizing_latency_us(self, percentile: int | None) -> float:
        """The latency the stability rule watches: average, or the `percentile` value."""
        latencies = self.sorted_latencies()
        if not latencies:
            return float("inf")
        if percentile is None:
            return sum(latencies) / len(latencies) / 1000.0
        return percentile_of_sorted(latencies, percentile) / 1000.0

    def errors(self) -> Counter[str]:
        return Counter(r.error or "unknown error" for r in self.failed)
