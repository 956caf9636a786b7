"""`Measurement`: what one stable measurement at one load level found.

Built by the measurer (analyzer.measure) and handed to the tuner, the reports and the CSV
writer. Durations are microseconds, as perf_analyzer prints them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class GpuMetrics:
    """Per GPU UUID: utilization (0-1), power (W), memory used and total (bytes)."""

    utilization: dict[str, float] = field(default_factory=dict)
    power_w: dict[str, float] = field(default_factory=dict)
    memory_used_bytes: dict[str, int] = field(default_factory=dict)
    memory_total_bytes: dict[str, int] = field(default_factory=dict)

    def columns(self) -> list[str]:
        """perf_analyzer's four CSV cells: `uuid:value;` per GPU, in UUID order."""
        return [
            "".join(f"{uuid}:{_double(value)};" for uuid, value in sorted(values.items()))
            for values in (
                self.utilization,
                self.power_w,
                self.memory_used_bytes,
                self.memory_total_bytes,
            )
        ]


def _double(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True, slots=True)
class ServerBreakdown:
    """Average per-request server-side durations (us) from the statistics extension: the
    difference of the counters before and after the stable windows, divided by the count."""

    request_count: int = 0  # successful requests the server counted in the windows
    execution_count: int = 0  # backend executions (batches) in the windows
    inference_count: int = 0  # batch rows inferred in the windows
    queue_us: float = 0.0
    compute_input_us: float = 0.0
    compute_infer_us: float = 0.0
    compute_output_us: float = 0.0
    overhead_us: float = 0.0  # server total minus queue and compute
    total_us: float = 0.0  # average of the server's success duration
    cache_hit_us: float = 0.0  # average response-cache lookup time of a hit
    cache_miss_us: float = 0.0  # average response-cache lookup+insert time of a miss
    available: bool = False  # False when the server gave no statistics (columns left out)


@dataclass(frozen=True, slots=True)
class Measurement:
    """A measurement at one concurrency or request rate.

    Latencies are nearest-rank percentiles (perf_analyzer's: the sample at index
    int(p/100 * (n-1) + 0.5) of the sorted latencies) over every successful request of the
    last windows merged (the stable ones, when `stable`); throughput is inferences per second
    (successful requests x batch size) over those windows. Failed requests are counted in
    `errors` (message -> count), never in the latencies. `warnings` says when the client could
    not keep up (busy over 50% of the time, or sending behind the asked request rate's
    schedule: `delayed_pct`) or the server fell behind the rate (requests piling up).
    """

    model: str
    concurrency: int  # 0 in request-rate mode
    request_rate: float  # 0 in concurrency mode (the requested rate otherwise)
    batch_size: int
    throughput: float  # inferences / s
    request_throughput: float  # requests / s
    request_count: int  # completed requests in the stable windows
    error_count: int
    errors: dict[str, int]  # message -> count
    latency_avg_us: float
    latency_p50_us: float
    latency_p90_us: float
    latency_p95_us: float
    latency_p99_us: float
    extra_percentiles_us: dict[int, float] = field(default_factory=dict)  # --percentile
    client_send_us: float = 0.0
    client_recv_us: float = 0.0
    client_overhead_pct: float = 0.0  # share of the client's own time, as perf_analyzer warns
    server: ServerBreakdown = field(default_factory=ServerBreakdown)
    stable: bool = True
    windows: int = 0  # measurement windows taken (all trials)
    window_seconds: float = 0.0  # total duration of the merged stable windows
    latency_std_us: float = 0.0  # sample standard deviation of the merged latencies
    send_rate: float = 0.0  # requests / s the client sent in the merged windows
    in_flight: int = 0  # requests outstanding at the end of the last merged window
    # request-rate mode: % of the sends in the merged windows that left more than 1 ms after
    # their scheduled time (perf_analyzer's delayed requests; over 1% comes with a warning)
    delayed_pct: float = 0.0
    warnings: tuple[str, ...] = ()  # client could not keep up, server stats missing, ...
    gpu: GpuMetrics | None = None  # --collect-metrics: the server's GPU metrics, merged
    # An ensemble's composing models (name -> their server breakdown over the same windows,
    # nested ensembles and their steps included, depth first); empty for a plain model.
    composing: dict[str, ServerBreakdown] = field(default_factory=dict)

    @property
    def level(self) -> float:
        """The concurrency, or the request rate in request-rate mode."""
        return self.concurrency if self.concurrency else self.request_rate

    def percentile_us(self, percentile: int) -> float:
        known = {
            50: self.latency_p50_us,
            90: self.latency_p90_us,
            95: self.latency_p95_us,
            99: self.latency_p99_us,
        }
        if percentile in known:
            return known[percentile]
        return self.extra_percentiles_us[percentile]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
