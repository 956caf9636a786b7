"""A tuned pipeline in the reports: its steps in order, the model of each and its part of the
best configuration, and each step's share of the end-to-end latency (the composing model's
server-side queue + compute per request, from the ensemble's measurement at the best load,
against the average end-to-end latency the client saw there)."""

from __future__ import annotations

import html
from dataclasses import dataclass

from common.html_page import Cell, number
from tuner.report import group
from tuner.report.group import GroupCell, GroupTable, code_cell, finite, number_cell, text_cell
from tuner.run_schema import RunSummary

STEP_PREFIX = "step."  # as tuner.evaluate.step_metrics names them


@dataclass(frozen=True, slots=True)
class StepShare:
    """One step's row in the pipeline table: its server-side time per request and its share
    of the end-to-end latency (None where the best trial has no breakdown of it)."""

    index: int
    model: str
    best: str  # the step's part of the best configuration ("" when none was found)
    queue_us: float | None
    compute_us: float | None
    share: float | None  # (queue + compute) / end-to-end average latency


def step_shares(summary: RunSummary) -> list[StepShare]:
    """One entry per step of `summary.pipeline`, in order; times None where the best trial
    has no server-side breakdown of that step."""
    metrics = group.best_metrics(summary)
    end_to_end = finite(metrics.get("avg_us"))
    shares = []
    for index, step in enumerate(summary.pipeline):
        queue = finite(metrics.get(f"{STEP_PREFIX}{step.model}.queue_us"))
        compute = finite(metrics.get(f"{STEP_PREFIX}{step.model}.compute_us"))
        share = None
        if queue is not None and compute is not None and end_to_end:
            share = (queue + compute) / end_to_end
        shares.append(StepShare(index, step.model, step.best, queue, compute, share))
    return shares


def pipeline_table(summary: RunSummary) -> GroupTable | None:
    """The pipeline's table (None for a single model or a traffic mix, whose models
    tuner/report/mix.py shows)."""
    if not summary.pipeline or summary.traffic_mix:
        return None
    steps = step_shares(summary)
    total = finite(group.best_metrics(summary).get("avg_us"))
    console_note = None
    if total is not None:
        console_note = (
            f"  share: the step's server queue + compute per request vs the end-to-end "
            f"average latency ({total / 1000:.2f} ms) at the best load"
        )
    html_note = (
        f"The share is the step's server-side queue + compute per request against the "
        f"end-to-end average latency ({total / 1000:.2f} ms) at the best configuration's load; "
        "the rest is the ensemble's own handling and the network."
        if total is not None
        else "No measurement of the best configuration: no shares."
    )
    return GroupTable(
        console_title=f"pipeline {summary.model}: " + " -> ".join(s.model for s in steps),
        html_title="Pipeline: " + " &rarr; ".join(html.escape(s.model) for s in steps),
        css_name="pipeline",
        columns=(
            ("step", "Step", False),
            ("model", "Model", True),
            ("best config", "Best config", True),
            ("queue ms", "Queue ms", False),
            ("compute ms", "Compute ms", False),
            ("share", "Share of latency", False),
        ),
        rows=tuple(
            (
                GroupCell(str(step.index), number(step.index, 0)),
                code_cell(step.model),
                text_cell(step.best or "-"),
                number_cell(step.queue_us, 2, 1000),
                number_cell(step.compute_us, 2, 1000),
                GroupCell(
                    _percent(step.share), Cell(_percent(step.share), step.share, numeric=True)
                ),
            )
            for step in steps
        ),
        console_note=console_note,
        html_note=html_note,
    )


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"
