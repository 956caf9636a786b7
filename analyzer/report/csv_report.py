"""perf_analyzer's `-f` CSV (src/report_writer.cc, ReportWriter::GenerateReport).

Columns: `Concurrency` (or `Request Rate`), `Inferences/Second`, `Client Send`, then, when the
server gives statistics, `Network+Server Send/Recv`, `Server Queue`, `Server Compute Input`,
`Server Compute Infer`, `Server Compute Output` (and `Server Cache Hit`, `Server Cache Miss`
when the model's response cache is on), `Client Recv`, one `pN latency` per percentile in
increasing order (50, 90, 95, 99 and --percentile), and with --verbose-csv `Avg latency`
(only without --percentile), `request/response` and `response wait`, then with
--collect-metrics `Avg GPU Utilization`, `Avg GPU Power Usage`, `Max GPU Memory Usage` and
`Total GPU Memory`, each cell `uuid:value;` per GPU (empty without a GPU).

Durations are whole microseconds, truncated. Network+Server Send/Recv is the average client
wait (average latency minus client send and receive) minus the server's queue, compute and
cache averages, floored at 0. Server averages divide each duration by its own count. Rows are
sorted by increasing throughput. Numbers other than durations print as C++ streams print
doubles (six significant digits), e.g. `69.2`.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from analyzer.measurement import Measurement
from analyzer.profiler.percentiles import REPORTED_PERCENTILES

GPU_COLUMNS = [
    "Avg GPU Utilization",
    "Avg GPU Power Usage",
    "Max GPU Memory Usage",
    "Total GPU Memory",
]


@dataclass(frozen=True, slots=True)
class CsvLayout:
    """Which optional columns the file has (decided once for the whole file)."""

    concurrency_mode: bool = True
    server_stats: bool = True
    cache_columns: bool = False
    percentile: int | None = None  # --percentile
    verbose: bool = False  # --verbose-csv
    gpu_metrics: bool = False  # --collect-metrics (written with --verbose-csv only)

    @property
    def percentiles(self) -> list[int]:
        wanted = set(REPORTED_PERCENTILES)
        if self.percentile is not None:
            wanted.add(self.percentile)
        return sorted(wanted)


def header(layout: CsvLayout) -> list[str]:
    """The column names for `layout`, in the order `row` writes the cells."""
    columns = timing_columns(layout)
    columns += [f"p{p} latency" for p in layout.percentiles]
    if layout.verbose:
        if layout.percentile is None:
            columns.append("Avg latency")
        columns += ["request/response", "response wait"]
        if layout.gpu_metrics:
            columns += GPU_COLUMNS
    return columns


def timing_columns(layout: CsvLayout) -> list[str]:
    """The level, the throughput and where the time went, up to and including Client Recv."""
    columns = ["Concurrency" if layout.concurrency_mode else "Request Rate", "Inferences/Second"]
    columns.append("Client Send")
    if layout.server_stats:
        columns += [
            "Network+Server Send/Recv",
            "Server Queue",
            "Server Compute Input",
            "Server Compute Infer",
            "Server Compute Output",
        ]
        if layout.cache_columns:
            columns += ["Server Cache Hit", "Server Cache Miss"]
    columns.append("Client Recv")
    return columns


def format_double(value: float) -> str:
    """A double as `std::ostream << value` prints it by default (%g, 6 digits)."""
    return f"{value:g}"


def row(m: Measurement, layout: CsvLayout) -> list[str]:
    """One measurement's cells, in `header`'s order (durations in whole microseconds,
    truncated)."""
    level = str(m.concurrency) if layout.concurrency_mode else format_double(m.request_rate)
    send_us = int(m.client_send_us)
    recv_us = int(m.client_recv_us)
    values = [level, format_double(m.throughput), str(send_us)]
    if layout.server_stats:
        server = m.server
        compute_us = server.compute_input_us + server.compute_infer_us + server.compute_output_us
        accounted_us = server.queue_us + compute_us + server.cache_hit_us + server.cache_miss_us
        client_wait_us = m.latency_avg_us - m.client_send_us - m.client_recv_us
        network_us = max(0.0, client_wait_us - accounted_us)
        values += [
            str(int(network_us)),
            str(int(server.queue_us)),
            str(int(server.compute_input_us)),
            str(int(server.compute_infer_us)),
            str(int(server.compute_output_us)),
        ]
        if layout.cache_columns:
            values += [str(int(server.cache_hit_us)), str(int(server.cache_miss_us))]
    values.append(str(recv_us))
    values += [str(int(m.percentile_us(p))) for p in layout.percentiles]
    if layout.verbose:
        avg_us = int(m.latency_avg_us)
        if layout.percentile is None:
            values.append(str(avg_us))
        values.append(str(send_us + recv_us))
        values.append(str(max(0, avg_us - send_us - recv_us)))
        if layout.gpu_metrics:
            values += m.gpu.columns() if m.gpu is not None else [""] * len(GPU_COLUMNS)
    return values


def csv_text(measurements: Sequence[Measurement], layout: CsvLayout) -> str:
    """The file's text: header, then one row per measurement by increasing throughput."""
    out = io.StringIO()
    out.write(",".join(header(layout)) + "\n")
    for m in sorted(measurements, key=lambda m: m.throughput):
        out.write(",".join(row(m, layout)) + "\n")
    return out.getvalue()


def write_csv(path: Path, measurements: Sequence[Measurement], layout: CsvLayout) -> None:
    """`csv_text` written to `path` (replacing it)."""
    path.write_text(csv_text(measurements, layout))
