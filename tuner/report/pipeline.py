"""A tuned pipeline in the reports: its steps in order, the model of each and its part of the
best configuration, and each step's share of the end-to-end latency (the composing model's
server-side queue + compute per request, from the ensemble's measurement at the best load,
against the average end-to-end latency the client saw there)."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from common.html_page import Cell, note, number, table
from tuner.run_schema import RunSummary

STEP_PREFIX = "step."  # as tuner.evaluate.step_metrics names them


@dataclass(frozen=True, slots=True)
class StepShare:
    index: int
    model: str
    best: str  # the step's part of the best configuration ("" when none was found)
    queue_us: float | None
    compute_us: float | None
    share: float | None  # (queue + compute) / end-to-end average latency

    @property
    def server_us(self) -> float | None:
        if self.queue_us is None or self.compute_us is None:
            return None
        return self.queue_us + self.compute_us


def step_shares(summary: RunSummary) -> list[StepShare]:
    """One entry per step of `summary.pipeline`, in order; times None where the best trial
    has no server-side breakdown of that step."""
    best = summary.best.outcome if summary.best is not None else None
    metrics = dict(best.metrics) if best is not None else {}
    end_to_end = _finite(metrics.get("avg_us"))
    shares = []
    for index, step in enumerate(summary.pipeline):
        queue = _finite(metrics.get(f"{STEP_PREFIX}{step.model}.queue_us"))
        compute = _finite(metrics.get(f"{STEP_PREFIX}{step.model}.compute_us"))
        share = None
        if queue is not None and compute is not None and end_to_end:
            share = (queue + compute) / end_to_end
        shares.append(StepShare(index, step.model, step.best, queue, compute, share))
    return shares


def end_to_end_us(summary: RunSummary) -> float | None:
    best = summary.best.outcome if summary.best is not None else None
    return _finite(best.metrics.get("avg_us")) if best is not None else None


def print_pipeline(summary: RunSummary, console: Console) -> None:
    """The pipeline's table in the terminal (nothing for a single model or a traffic mix,
    whose models tuner/report/mix.py shows)."""
    if not summary.pipeline or summary.traffic_mix:
        return
    steps = step_shares(summary)
    table_ = Table(
        title=f"pipeline {escape(summary.model)}: " + " -> ".join(escape(s.model) for s in steps),
        title_justify="left",
    )
    for column in ("step", "model", "best config", "queue ms", "compute ms", "share"):
        table_.add_column(
            column, justify="left" if "model" in column or "config" in column else "right"
        )
    for step in steps:
        table_.add_row(
            str(step.index),
            escape(step.model),
            escape(step.best or "-"),
            _ms(step.queue_us),
            _ms(step.compute_us),
            _percent(step.share),
        )
    console.print(table_)
    total = end_to_end_us(summary)
    if total is not None:
        console.print(
            f"  share: the step's server queue + compute per request vs the end-to-end "
            f"average latency ({total / 1000:.2f} ms) at the best load"
        )


def pipeline_html(summary: RunSummary, anchor: str) -> str:
    """The pipeline's table for the HTML report ("" for a single model or a traffic mix)."""
    if not summary.pipeline or summary.traffic_mix:
        return ""
    steps = step_shares(summary)
    rows: list[list[Cell | str]] = [
        [
            number(step.index, 0),
            Cell(f"<code>{html.escape(step.model)}</code>", raw=True),
            Cell(step.best or "-"),
            number(step.queue_us, 2, 1000),
            number(step.compute_us, 2, 1000),
            Cell(_percent(step.share), step.share, numeric=True),
        ]
        for step in steps
    ]
    headers = ["Step", "Model", "Best config", "Queue ms", "Compute ms", "Share of latency"]
    total = end_to_end_us(summary)
    text = (
        f"The share is the step's server-side queue + compute per request against the "
        f"end-to-end average latency ({total / 1000:.2f} ms) at the best configuration's load; "
        "the rest is the ensemble's own handling and the network."
        if total is not None
        else "No measurement of the best configuration: no shares."
    )
    flow = " &rarr; ".join(html.escape(s.model) for s in steps)
    return (
        f"<h3>Pipeline: {flow}</h3>"
        + table(headers, rows, css_id=f"{anchor}-pipeline")
        + note(text)
    )


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _ms(value_us: float | None) -> str:
    return "-" if value_us is None else f"{value_us / 1000:.2f}"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"
