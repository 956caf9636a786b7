"""`--html FILE`: a perf run as one self-contained HTML page (opens offline).

Throughput and latency percentiles by load level (concurrency or request rate), throughput
against p95 latency, and the latency breakdown of every level as stacked bars: the server's
queue, compute input / infer / output and overhead (from the statistics extension), and the
rest of the client's average latency (client + network). `LatencyParts` and
`breakdown_figure` are shared with the tuner's report.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import astuple, dataclass, fields
from datetime import datetime
from pathlib import Path

import plotly.graph_objects as go

from analyzer.measurement import Measurement
from common.html_page import Cell, HtmlPage, definition_list, note, number, table

BREAKDOWN_LABELS = (
    "Queue",
    "Compute input",
    "Compute infer",
    "Compute output",
    "Server overhead",
    "Client + network",
)
BREAKDOWN_COLORS = ("#f0b429", "#7cc4fa", "#2680c2", "#0b69a3", "#9aa5b1", "#cbd2d9")
_PERCENTILE_COLORS = {50: "#3ebd93", 90: "#f7c948", 95: "#f38d68", 99: "#cf1124"}


@dataclass(frozen=True, slots=True)
class LatencyParts:
    """Where a request's average latency went, in microseconds (fields in BREAKDOWN_LABELS'
    order)."""

    queue_us: float
    compute_input_us: float
    compute_infer_us: float
    compute_output_us: float
    overhead_us: float
    client_us: float  # the client's average latency minus the server's: send, network, receive

    @classmethod
    def of(cls, m: Measurement) -> LatencyParts | None:
        server = m.server
        if not server.available:
            return None
        return cls(
            server.queue_us,
            server.compute_input_us,
            server.compute_infer_us,
            server.compute_output_us,
            server.overhead_us,
            max(0.0, m.latency_avg_us - server.total_us),
        )


def breakdown_figure(labels: Sequence[str], parts: Sequence[LatencyParts], axis: str) -> go.Figure:
    """Stacked bars (ms), one per label; `axis` names the labels (e.g. 'Concurrency')."""
    fig = go.Figure()
    names = [f.name for f in fields(LatencyParts)]
    values = [astuple(p) for p in parts]
    for index, (name, color) in enumerate(zip(BREAKDOWN_LABELS, BREAKDOWN_COLORS, strict=True)):
        fig.add_bar(
            name=name,
            x=list(labels),
            y=[v[index] / 1000 for v in values],
            marker_color=color,
            hovertemplate=f"{name}: %{{y:.3f}} ms<extra>{names[index]}</extra>",
        )
    fig.update_layout(
        barmode="stack",
        xaxis_title=axis,
        yaxis_title="average latency (ms)",
        xaxis_type="category",
        legend={"traceorder": "normal"},
    )
    return fig


def perf_page(
    measurements: Sequence[Measurement],
    concurrency_mode: bool,
    details: Sequence[tuple[str, str]] = (),
) -> str:
    """The page's HTML: `details` (label, value) describe the run (server, model, flags)."""
    model = measurements[0].model if measurements else ""
    page = HtmlPage(
        f"autotune perf: {model}" if model else "autotune perf",
        f"generated {datetime.now().astimezone():%Y-%m-%d %H:%M %Z}",
    )
    axis = "Concurrency" if concurrency_mode else "Request rate (requests/s)"
    page.add_section("run", "Run", definition_list(details) if details else "")
    if not measurements:
        page.add_section("results", "Results", note("No load level was reported."))
        return page.render()
    levels = [m.level for m in measurements]
    page.add_section("throughput", "Throughput", page.figure(_throughput(measurements, axis)))
    page.add_section("latency", "Latency", page.figure(_latency(measurements, levels, axis)))
    page.add_section(
        "tradeoff", "Throughput vs p95 latency", page.figure(_tradeoff(measurements, axis))
    )
    parts = [LatencyParts.of(m) for m in measurements]
    if all(p is not None for p in parts):
        labels = [f"{level:g}" for level in levels]
        figure = page.figure(breakdown_figure(labels, [p for p in parts if p], axis))
    else:
        figure = note("The server gave no statistics: no breakdown.")
    page.add_section("breakdown", "Latency breakdown", figure)
    page.add_section("table", "Measurements", _table(measurements, axis))
    return page.render()


def _throughput(measurements: Sequence[Measurement], axis: str) -> go.Figure:
    fig = go.Figure()
    fig.add_scatter(
        x=[m.level for m in measurements],
        y=[m.throughput for m in measurements],
        mode="lines+markers",
        name="infer/s",
        hovertemplate="%{x}: %{y:,.1f} infer/s<extra></extra>",
    )
    fig.update_layout(xaxis_title=axis, yaxis_title="inferences / s", yaxis_rangemode="tozero")
    _level_ticks(fig, [m.level for m in measurements])
    return fig


def _latency(measurements: Sequence[Measurement], levels: list[float], axis: str) -> go.Figure:
    fig = go.Figure()
    percentiles = sorted({50, 90, 95, 99, *measurements[0].extra_percentiles_us})
    for p in percentiles:
        fig.add_scatter(
            x=levels,
            y=[m.percentile_us(p) / 1000 for m in measurements],
            mode="lines+markers",
            name=f"p{p}",
            line_color=_PERCENTILE_COLORS.get(p),
            hovertemplate=f"p{p}: %{{y:.3f}} ms<extra></extra>",
        )
    fig.add_scatter(
        x=levels,
        y=[m.latency_avg_us / 1000 for m in measurements],
        mode="lines",
        name="average",
        line={"dash": "dot", "color": "#7b8794"},
        hovertemplate="average: %{y:.3f} ms<extra></extra>",
    )
    fig.update_layout(xaxis_title=axis, yaxis_title="latency (ms)", yaxis_rangemode="tozero")
    _level_ticks(fig, levels)
    return fig


def _level_ticks(fig: go.Figure, levels: Sequence[float]) -> None:
    """A tick at each measured level (not at 1.5 between concurrency 1 and 2)."""
    if len(levels) <= 20:
        fig.update_xaxes(tickmode="array", tickvals=list(levels))


def _tradeoff(measurements: Sequence[Measurement], axis: str) -> go.Figure:
    fig = go.Figure()
    fig.add_scatter(
        x=[m.latency_p95_us / 1000 for m in measurements],
        y=[m.throughput for m in measurements],
        mode="lines+markers+text",
        text=[f"{m.level:g}" for m in measurements],
        textposition="top left",
        name=axis,
        hovertemplate="p95 %{x:.3f} ms: %{y:,.1f} infer/s<extra>%{text}</extra>",
    )
    fig.update_layout(xaxis_title="p95 latency (ms)", yaxis_title="inferences / s")
    return fig


def _table(measurements: Sequence[Measurement], axis: str) -> str:
    headers = [axis, "Infer/s", "p50 ms", "p90 ms", "p95 ms", "p99 ms", "Avg ms"]
    headers += ["Queue ms", "Compute ms", "Errors", "Stable"]
    rows = []
    for m in measurements:
        server = m.server
        compute = server.compute_input_us + server.compute_infer_us + server.compute_output_us
        rows.append(
            [
                number(m.level, 0 if m.concurrency else 1),
                number(m.throughput),
                *(
                    number(v, 3, 1000)
                    for v in (
                        m.latency_p50_us,
                        m.latency_p90_us,
                        m.latency_p95_us,
                        m.latency_p99_us,
                        m.latency_avg_us,
                    )
                ),
                number(server.queue_us if server.available else None, 3, 1000),
                number(compute if server.available else None, 3, 1000),
                number(m.error_count, 0),
                Cell("yes" if m.stable else "no"),
            ]
        )
    return table(headers, rows, sortable=True)


def write_html(
    path: Path,
    measurements: Sequence[Measurement],
    concurrency_mode: bool,
    details: Sequence[tuple[str, str]] = (),
) -> None:
    """`perf_page` written to `path` (UTF-8, replacing it)."""
    path.write_text(perf_page(measurements, concurrency_mode, details), encoding="utf-8")
