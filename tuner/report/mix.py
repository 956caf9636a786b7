"""A tuned traffic mix in the reports: each model with its share of the requests, its part of
the best configuration, and its throughput and latency under the mix (measured all at once,
every model at its share of the best total rate)."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from common.html_page import Cell, note, number, table
from tuner.run_schema import RunSummary

MIX_PREFIX = "mix."  # as tuner.mix_evaluate.mix_metric names them


@dataclass(frozen=True, slots=True)
class MixModelView:
    model: str
    share: float
    best: str  # the model's part of the best configuration ("" when none was found)
    throughput: float | None  # inferences/s under the mix at the best total rate
    latency_us: float | None  # at the budget's percentile
    request_rate: float | None  # the model's part of the total rate


def mix_models(summary: RunSummary) -> list[MixModelView]:
    """One entry per model of the mix, in the mix's order; figures None without a best."""
    best = summary.best.outcome if summary.best is not None else None
    metrics = dict(best.metrics) if best is not None else {}
    # A model's part is empty when the best leaves its config as written.
    found = "as written" if best is not None else ""
    parts = {step.model: step.best or found for step in summary.pipeline}
    percentile = summary.budget.percentile

    def metric(model: str, name: str) -> float | None:
        return _finite(metrics.get(f"{MIX_PREFIX}{model}.{name}"))

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


def total_rate(summary: RunSummary) -> float | None:
    best = summary.best.outcome if summary.best is not None else None
    return _finite(best.metrics.get("request_rate")) if best is not None else None


def print_mix(summary: RunSummary, console: Console) -> None:
    """The mix's table in the terminal (nothing for a model or a pipeline)."""
    if not summary.traffic_mix:
        return
    percentile = summary.budget.percentile
    table_ = Table(title=f"traffic mix {escape(summary.model)}", title_justify="left")
    for column in ("model", "share", "best config", "infer/s", f"p{percentile} ms", "rate/s"):
        table_.add_column(column, justify="left" if column in ("model", "best config") else "right")
    for view in mix_models(summary):
        table_.add_row(
            escape(view.model),
            f"{100 * view.share:.4g}%",
            escape(view.best or "-"),
            _fixed(view.throughput, 1),
            _fixed(None if view.latency_us is None else view.latency_us / 1000, 2),
            _fixed(view.request_rate, 1),
        )
    console.print(table_)
    rate = total_rate(summary)
    if rate is not None:
        console.print(
            f"  measured all at once at a total of {rate:g} requests/s, each model at its "
            f"share; every model within {summary.budget.describe()}"
        )


def mix_html(summary: RunSummary, anchor: str) -> str:
    """The mix's table for the HTML report ("" for a model or a pipeline)."""
    if not summary.traffic_mix:
        return ""
    percentile = summary.budget.percentile
    rows: list[list[Cell | str]] = [
        [
            Cell(f"<code>{html.escape(view.model)}</code>", raw=True),
            Cell(f"{100 * view.share:.4g}%", view.share, numeric=True),
            Cell(view.best or "-"),
            number(view.throughput, 1),
            number(view.latency_us, 2, 1000),
            number(view.request_rate, 1),
        ]
        for view in mix_models(summary)
    ]
    headers = ["Model", "Share", "Best config", "Infer/s", f"p{percentile} ms", "Rate /s"]
    rate = total_rate(summary)
    text = (
        f"Measured all at once at a total of {rate:g} requests/s (the highest total rate at "
        f"which every model stayed within {summary.budget.describe()}), each "
        "model sent its share of it."
        if rate is not None
        else "No configuration met the budget under the mix: no figures."
    )
    models = ", ".join(html.escape(model) for model, _ in summary.traffic_mix)
    return (
        f"<h3>Traffic mix: {models}</h3>"
        + table(headers, rows, css_id=f"{anchor}-mix")
        + note(text)
    )


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _fixed(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"
