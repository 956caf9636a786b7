"""A tuned traffic mix in the reports: each model with its share of the requests, its part of
the best configuration, and its throughput and latency under the mix (measured all at once,
every model at its share of the best total rate)."""

from __future__ import annotations

import html
from dataclasses import dataclass

from common.html_page import Cell
from tuner.report import group
from tuner.report.group import GroupCell, GroupTable, code_cell, finite, number_cell, text_cell
from tuner.run_schema import RunSummary

MIX_PREFIX = "mix."  # as tuner.mix_evaluate.mix_metric names them


@dataclass(frozen=True, slots=True)
class MixModelView:
    """One model's row in the mix table (None: no best, or no figure for it)."""

    model: str
    share: float
    best: str  # the model's part of the best configuration ("" when none was found)
    throughput: float | None  # inferences/s under the mix at the best total rate
    latency_us: float | None  # at the budget's percentile
    request_rate: float | None  # the model's part of the total rate


def mix_models(summary: RunSummary) -> list[MixModelView]:
    """One entry per model of the mix, in the mix's order; figures None without a best."""
    metrics = group.best_metrics(summary)
    # A model's part is empty when the best leaves its config as written.
    found = "as written" if summary.best is not None else ""
    parts = {step.model: step.best or found for step in summary.pipeline}
    percentile = summary.budget.percentile

    def metric(model: str, name: str) -> float | None:
        return finite(metrics.get(f"{MIX_PREFIX}{model}.{name}"))

    return [
        MixModelView(
            model,
            share,
            parts.get(model, ""),
            metric(model, "throughput"),
            metric(model, f"p{percentile}_us"),
            metric(model, "request_rate"),
        )
        for model, share in summary.traffic_mix
    ]


def mix_table(summary: RunSummary) -> GroupTable | None:
    """The mix's table (None for a model or a pipeline)."""
    if not summary.traffic_mix:
        return None
    percentile = summary.budget.percentile
    rate = finite(group.best_metrics(summary).get("request_rate"))
    console_note = None
    if rate is not None:
        console_note = (
            f"  measured all at once at a total of {rate:g} requests/s, each model at its "
            f"share; every model within {summary.budget.describe()}"
        )
    html_note = (
        f"Measured all at once at a total of {rate:g} requests/s (the highest total rate at "
        f"which every model stayed within {summary.budget.describe()}), each "
        "model sent its share of it."
        if rate is not None
        else "No configuration met the budget under the mix: no figures."
    )
    models = ", ".join(html.escape(model) for model, _ in summary.traffic_mix)
    return GroupTable(
        console_title=f"traffic mix {summary.model}",
        html_title=f"Traffic mix: {models}",
        css_name="mix",
        columns=(
            ("model", "Model", True),
            ("share", "Share", False),
            ("best config", "Best config", True),
            ("infer/s", "Infer/s", False),
            (f"p{percentile} ms", f"p{percentile} ms", False),
            ("rate/s", "Rate /s", False),
        ),
        rows=tuple(
            (
                code_cell(view.model),
                GroupCell(
                    f"{100 * view.share:.4g}%",
                    Cell(f"{100 * view.share:.4g}%", view.share, numeric=True),
                ),
                text_cell(view.best or "-"),
                number_cell(view.throughput, 1),
                number_cell(view.latency_us, 2, 1000),
                number_cell(view.request_rate, 1),
            )
            for view in mix_models(summary)
        ),
        console_note=console_note,
        html_note=html_note,
    )
