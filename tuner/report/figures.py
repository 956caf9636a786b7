"""The plotly figures of a model's tuning report."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from analyzer.api import LatencyParts, breakdown_figure
from tuner.report.summary import ModelSummary, TrialView

FEASIBLE = "#2f8132"
INFEASIBLE = "#c5283d"
FRONT = "#1f2933"


def pareto_front(trials: Sequence[TrialView]) -> list[TrialView]:
    """The measured trials no other trial beats on both throughput (higher) and latency
    (lower), by increasing latency."""
    front: list[TrialView] = []
    ordered = sorted(
        (t for t in trials if t.measured),
        key=lambda t: (t.latency_us or 0.0, -(t.throughput or 0.0)),
    )
    for trial in ordered:
        if not front or (trial.throughput or 0.0) > (front[-1].throughput or 0.0):
            front.append(trial)
    return front


def tradeoff_figure(summary: ModelSummary) -> go.Figure:
    """Throughput against the budget's latency percentile: every measured trial, the budget
    as a vertical line, the Pareto front as a line, the config as written and the best marked."""
    fig = go.Figure()
    measured = [t for t in summary.trials if t.measured]
    for feasible, name, color, symbol in (
        (True, "feasible", FEASIBLE, "circle"),
        (False, "infeasible", INFEASIBLE, "x"),
    ):
        group = [t for t in measured if t.feasible == feasible]
        if group:
            fig.add_scatter(
                name=name,
                mode="markers",
                x=[_ms(t.latency_us) for t in group],
                y=[t.throughput for t in group],
                marker={"color": color, "symbol": symbol, "size": 9},
                customdata=[[t.number, t.label, _status(t)] for t in group],
                hovertemplate="trial %{customdata[0]}: %{y:,.1f} infer/s, %{x:.2f} ms"
                "<br>%{customdata[1]}<br>%{customdata[2]}<extra></extra>",
            )
    front = pareto_front(measured)
    if front:
        fig.add_scatter(
            name="Pareto front",
            mode="lines+markers",
            x=[_ms(t.latency_us) for t in front],
            y=[t.throughput for t in front],
            line={"color": FRONT, "dash": "dot", "shape": "hv"},
            marker={"size": 15, "color": "rgba(0,0,0,0)", "line": {"color": FRONT, "width": 2}},
            hoverinfo="skip",
        )
    for label, trial, marker in (
        ("as written", summary.as_written, {"symbol": "diamond-open", "color": "#8d2b0b"}),
        ("best", summary.best, {"symbol": "star", "color": "#f0b429"}),
    ):
        if trial is not None and trial.measured:
            fig.add_scatter(
                name=f"{label} (trial {trial.number})",
                mode="markers",
                x=[_ms(trial.latency_us)],
                y=[trial.throughput],
                marker={**marker, "size": 18, "line": {"width": 2, "color": marker["color"]}},
                hovertemplate=f"{label}: %{{y:,.1f}} infer/s, %{{x:.2f}} ms<extra></extra>",
            )
    fig.add_vline(
        x=summary.limit_us / 1000,
        line={"color": INFEASIBLE, "dash": "dash"},
        annotation_text=f"budget {summary.budget}",
        annotation_position="top left",
    )
    fig.update_layout(
        xaxis_title=f"p{summary.percentile} latency (ms)",
        yaxis_title="inferences / s",
        xaxis_rangemode="tozero",
        yaxis_rangemode="tozero",
    )
    return fig


def history_figure(summary: ModelSummary) -> go.Figure:
    """Each trial's throughput by trial number, and the best feasible throughput so far."""
    fig = go.Figure()
    trials = sorted(summary.trials, key=lambda t: t.number)
    for feasible, name, color, symbol in (
        (True, "feasible trial", FEASIBLE, "circle"),
        (False, "infeasible trial", INFEASIBLE, "x"),
    ):
        group = [t for t in trials if t.throughput and t.feasible == feasible]
        if group:
            fig.add_scatter(
                name=name,
                mode="markers",
                x=[t.number for t in group],
                y=[t.throughput for t in group],
                marker={"color": color, "symbol": symbol, "size": 9},
                customdata=[[t.label, _status(t)] for t in group],
                hovertemplate="trial %{x}: %{y:,.1f} infer/s<br>%{customdata[0]}"
                "<br>%{customdata[1]}<extra></extra>",
            )
    best: float | None = None
    numbers: list[int] = []
    values: list[float | None] = []
    for trial in trials:
        if trial.feasible and trial.throughput and (best is None or trial.throughput > best):
            best = trial.throughput
        numbers.append(trial.number)
        values.append(best)
    fig.add_scatter(
        name="best feasible so far",
        mode="lines",
        x=numbers,
        y=values,
        line={"color": FEASIBLE, "shape": "hv", "width": 3},
        hovertemplate="after trial %{x}: %{y:,.1f} infer/s<extra></extra>",
    )
    fig.update_layout(
        xaxis_title="trial",
        yaxis_title="inferences / s",
        xaxis={"tickmode": "linear", "dtick": 1} if len(trials) <= 20 else {},
        yaxis_rangemode="tozero",
    )
    return fig


def importance_figure(values: dict[str, float]) -> go.Figure:
    """Horizontal bars, the most important parameter on top."""
    names = list(values)[::-1]
    fig = go.Figure(
        go.Bar(
            x=[values[n] for n in names],
            y=names,
            orientation="h",
            marker_color="#2680c2",
            hovertemplate="%{y}: %{x:.3f}<extra></extra>",
        )
    )
    fig.update_layout(xaxis_title="importance for throughput", xaxis_range=[0, 1])
    return fig


_BREAKDOWN_METRICS = (
    "server_queue_us",
    "server_compute_input_us",
    "server_compute_infer_us",
    "server_compute_output_us",
    "server_overhead_us",
)


def latency_parts(trial: TrialView) -> LatencyParts | None:
    """The server breakdown of a trial's measurement, None when it has none."""
    values = [trial.metric(name) for name in _BREAKDOWN_METRICS]
    average = trial.metric("avg_us")
    server = [v for v in values if v is not None]
    if average is None or len(server) != len(values):
        return None
    queue, compute_input, compute_infer, compute_output, overhead = server
    return LatencyParts(
        queue,
        compute_input,
        compute_infer,
        compute_output,
        overhead,
        client_us=max(0.0, average - sum(server)),
    )


def model_breakdown_figure(summary: ModelSummary) -> go.Figure | None:
    """The config as written and the best as stacked bars; None when neither has a breakdown."""
    labels: list[str] = []
    parts: list[LatencyParts] = []
    for label, trial in (("as written", summary.as_written), ("best", summary.best)):
        found = latency_parts(trial) if trial is not None else None
        if trial is not None and found is not None:
            labels.append(f"{label} (trial {trial.number})")
            parts.append(found)
    if not parts:
        return None
    return breakdown_figure(labels, parts, "configuration")


def _ms(value_us: float | None) -> float | None:
    return None if value_us is None else value_us / 1000


def _status(trial: TrialView) -> str:
    if trial.feasible:
        return "feasible"
    outcome = trial.outcome
    if outcome is None:
        return trial.state.lower()
    return f"{outcome.status}: {outcome.message}" if outcome.message else outcome.status
