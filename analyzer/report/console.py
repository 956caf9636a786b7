"""The console summary of a perf run: one rich table row per reported level."""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.console import Console
from rich.table import Table

from analyzer.measurement import GpuMetrics, Measurement


def results_table(measurements: Sequence[Measurement], concurrency_mode: bool) -> Table:
    """Level, infer/s, latency percentiles, server queue and compute (ms), failed requests."""
    table = Table(
        title="autotune perf (latencies in ms)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        padding=(0, 1),
        pad_edge=False,
        collapse_padding=True,
    )
    table.add_column("Conc." if concurrency_mode else "Rate/s", justify="right", no_wrap=True)
    for name in ("Infer/s", "p50", "p90", "p95", "p99", "Queue", "Compute", "Errors"):
        table.add_column(name, justify="right", no_wrap=True)
    for m in measurements:
        server = m.server
        compute_us = server.compute_input_us + server.compute_infer_us + server.compute_output_us
        table.add_row(
            str(m.concurrency) if concurrency_mode else f"{m.request_rate:g}",
            f"{m.throughput:,.1f}",
            *(
                f"{v / 1000:.3f}"
                for v in (m.latency_p50_us, m.latency_p90_us, m.latency_p95_us, m.latency_p99_us)
            ),
            f"{server.queue_us / 1000:.3f}" if server.available else "-",
            f"{compute_us / 1000:.3f}" if server.available else "-",
            str(m.error_count),
        )
    return table


def print_results(
    measurements: Sequence[Measurement], concurrency_mode: bool, console: Console
) -> None:
    """The results table on `console`; nothing when no level was reported."""
    if measurements:
        console.print(results_table(measurements, concurrency_mode))


MAX_GPUS_PRINTED = 16


def gpu_metrics_lines(gpu: GpuMetrics) -> list[str]:
    """perf_analyzer's "Server Prometheus Metrics" block (--collect-metrics): per GPU, the
    average utilization (%) and power, the most memory used and the total."""
    sections = (
        ("Avg GPU Utilization", gpu.utilization, lambda v: f"{v * 100:g}%"),
        ("Avg GPU Power Usage", gpu.power_w, lambda v: f"{v:g} watts"),
        ("Max GPU Memory Usage", gpu.memory_used_bytes, lambda v: f"{v} bytes"),
        ("Total GPU Memory", gpu.memory_total_bytes, lambda v: f"{v} bytes"),
    )
    lines = ["  Server Prometheus Metrics: "]
    if any(len(values) > MAX_GPUS_PRINTED for _, values, _ in sections):
        return [
            *lines,
            "Too many GPUs on system to print out individual Prometheus metrics, use the CSV "
            "output feature to see metrics.",
        ]
    for title, values, show in sections:
        lines.append(f"    {title}:")
        lines += [f"      {uuid} : {show(value)}" for uuid, value in sorted(values.items())]
    return lines
