"""The console summary of a perf run: one rich table row per reported level."""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.console import Console
from rich.table import Table

from analyzer.measurement import Measurement


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
    if measurements:
        console.print(results_table(measurements, concurrency_mode))
