"""An ensemble's server-side breakdown per composing model, as perf_analyzer reports it
(src/inference_profiler.cc ReportServerSideStats, src/report_writer.cc).

Console: the ensemble's own counts and average latency, whose queue and compute are the sums
of its composing models' (a nested ensemble counts its own composing models'), then
"Composing models:" and each model's counts and average queue / compute input / infer /
output, nested ensembles indented under their parent.

CSV: next to the `-f` file, one file per composing model named `<model>_v<version>.<file>`,
with the main file's columns up to `Client Recv`: its inferences per second are the
ensemble's scaled by the ratio of the model's successful requests to the ensemble's; client
send and receive are 0; `Network+Server Send/Recv` is the model's own overhead (its average
request time minus queue, compute and cache).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from analyzer.ensembles import ComposingModel
from analyzer.measurement import Measurement, ServerBreakdown
from analyzer.report.csv_report import CsvLayout, format_double, timing_columns


def compute_us(server: ServerBreakdown) -> float:
    """A model's average compute time: input, infer and output together (microseconds)."""
    return server.compute_input_us + server.compute_infer_us + server.compute_output_us


def ensemble_queue_compute_us(
    parent: str, models: Sequence[ComposingModel], composing: Mapping[str, ServerBreakdown]
) -> tuple[float, float]:
    """perf_analyzer's queue and compute of ensemble `parent`: the sums over its steps'
    models, a nested ensemble contributing its own steps' sums."""
    queue = compute = 0.0
    for model in models:
        if model.parent != parent or model.name not in composing:
            continue
        if model.is_ensemble:
            nested_queue, nested_compute = ensemble_queue_compute_us(model.name, models, composing)
            queue += nested_queue
            compute += nested_compute
        else:
            queue += composing[model.name].queue_us
            compute += compute_us(composing[model.name])
    return queue, compute


def composing_lines(
    m: Measurement, ensemble: str, models: Sequence[ComposingModel], versions: Mapping[str, str]
) -> list[str]:
    """The "Server:" block of an ensemble with its "Composing models:" (empty for a plain
    model or without server statistics)."""
    if not m.composing or not m.server.available:
        return []
    return ["  Server: ", *_model_block(m.server, ensemble, 1, models, m.composing, versions)]


def _model_block(
    server: ServerBreakdown,
    name: str,
    level: int,
    models: Sequence[ComposingModel],
    composing: Mapping[str, ServerBreakdown],
    versions: Mapping[str, str],
) -> list[str]:
    ident = "  " * level
    if server.request_count == 0:
        return [f"{ident}  Request count: 0"]
    total = int(server.total_us)
    lines = [
        f"{ident}  Inference count: {server.inference_count}",
        f"{ident}  Execution count: {server.execution_count}",
        f"{ident}  Successful request count: {server.request_count}",
    ]
    children = [model for model in models if model.parent == name]
    if not children:
        queue, compute = int(server.queue_us), int(compute_us(server))
        lines.append(
            f"{ident}  Avg request latency: {total} usec (overhead"
            f" {max(0, total - queue - compute)} usec + queue {queue} usec + compute input"
            f" {int(server.compute_input_us)} usec + compute infer"
            f" {int(server.compute_infer_us)} usec + compute output"
            f" {int(server.compute_output_us)} usec)"
        )
        return lines
    queue_f, compute_f = ensemble_queue_compute_us(name, models, composing)
    queue, compute = int(queue_f), int(compute_f)
    lines += [
        f"{ident}  Avg request latency: {total} usec (overhead"
        f" {max(0, total - queue - compute)} usec + queue {queue} usec + compute"
        f" {compute} usec)",
        "",
        f"{ident}Composing models: ",
    ]
    for child in children:
        breakdown = composing.get(child.name)
        if breakdown is None:
            continue
        lines.append(f"{ident}{child.name}, version: {versions.get(child.name, child.version)}")
        lines += _model_block(breakdown, child.name, level + 1, models, composing, versions)
        lines.append("")
    return lines


def composing_csv_path(csv_path: Path, model: str, version: str) -> Path:
    """`<model>_v<version>.<file>` next to the `-f` file, as perf_analyzer names it."""
    return csv_path.with_name(f"{model}_v{version}.{csv_path.name}")


def composing_csv_text(measurements: Sequence[Measurement], model: str, layout: CsvLayout) -> str:
    """One composing model's file, rows in the main file's order (increasing throughput)."""
    # perf_analyzer's per-model file: the main file's timing columns, server ones always.
    header = timing_columns(replace(layout, server_stats=True))
    rows = [",".join(header)]
    for m in sorted(measurements, key=lambda m: m.throughput):
        server = m.composing.get(model, ServerBreakdown())
        ratio = server.request_count / m.server.request_count if m.server.request_count else 0.0
        accounted = server.queue_us + compute_us(server) + server.cache_hit_us
        accounted += server.cache_miss_us
        values = [
            str(m.concurrency) if layout.concurrency_mode else format_double(m.request_rate),
            format_double(ratio * m.throughput),
            "0",
            str(int(max(0.0, server.total_us - accounted))),
            str(int(server.queue_us)),
            str(int(server.compute_input_us)),
            str(int(server.compute_infer_us)),
            str(int(server.compute_output_us)),
        ]
        if layout.cache_columns:
            values += [str(int(server.cache_hit_us)), str(int(server.cache_miss_us))]
        values.append("0")
        rows.append(",".join(values))
    return "\n".join(rows) + "\n"


def write_composing_csvs(
    csv_path: Path,
    measurements: Sequence[Measurement],
    versions: Mapping[str, str],
    layout: CsvLayout,
) -> list[Path]:
    """One file per composing model the measurements have; the paths written."""
    if not measurements or not layout.server_stats:
        return []
    written = []
    for model in measurements[0].composing:
        path = composing_csv_path(csv_path, model, versions.get(model, ""))
        path.write_text(composing_csv_text(measurements, model, layout))
        written.append(path)
    return written
