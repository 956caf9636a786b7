"""A tuning run's summary in the terminal (rich), one renderer for both the end of a live run
and `autotune report`: per model, the config as written vs the best, the ratio, the changed
fields, the precision verdicts and how it ended (what was written, or why nothing was)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tuner.report.group import print_group
from tuner.report.group_view import group_table
from tuner.report.remeasure import latency_text, print_remeasure, throughput_text
from tuner.run_schema import RunSummary
from tuner.search_types import TrialRecord

COLUMNS = ("infer/s", "p50 ms", "p95 ms", "p99 ms", "concurrency", "trial", "config")


def print_run(summaries: Sequence[RunSummary], console: Console) -> None:
    """Every model's summary of a run, in order (`autotune report`)."""
    for summary in summaries:
        print_summary(summary, console)


def print_summary(summary: RunSummary, console: Console) -> None:
    """One model's summary, at the end of a live run as in `autotune report`: the as-written
    and best trials, the re-measure, the group table, the ratio, the changed fields, the
    precision verdicts and what was written."""
    trials = summary.trials
    feasible = sum(t.feasible for t in trials)
    budget = summary.budget.describe()
    table = Table(
        title=f"{escape(summary.model)}: {escape(budget)} ({summary.platform.describe()}; "
        f"{len(trials)} trials, {feasible} feasible)",
        title_justify="left",
    )
    table.add_column("")
    for column in COLUMNS:
        table.add_column(column, justify="left" if column == "config" else "right")
    for label, trial in (("as written", summary.as_written), ("best", summary.best)):
        table.add_row(label, *_row(summary, trial), style="bold" if label == "best" else None)
    console.print(table)
    if summary.server is not None:
        console.print(f"  measured on {escape(summary.server.describe())}")
    print_remeasure(summary, console)
    print_group(group_table(summary), console)
    best, as_written = _throughput(summary.best), _throughput(summary.as_written)
    if best and as_written:
        console.print(f"  best / as written throughput: [bold]{best / as_written:.2f}x")
    for change in summary.changes:
        console.print(
            f"  {escape(change.field)}: [red strike]{escape(change.old)}[/] -> "
            f"[green]{escape(change.new)}[/]"
        )
    if summary.best is not None and not summary.changes:
        console.print("  the configuration as written is the best found: nothing to write")
    for variant in summary.variants:
        style = "red" if variant.failed else "dim"
        console.print(f"  [{style}]{escape(variant.verdict or variant.precision)}[/]")
    _print_ending(summary, console)


def _print_ending(summary: RunSummary, console: Console) -> None:
    """What was written, or why nothing was."""
    budget = summary.budget.describe()
    if summary.unmeasured_reason is not None:
        console.print(
            f"error: '{summary.model}' could not be tuned: no configuration could be measured "
            f"({summary.unmeasured_reason}); nothing was written",
            style="red",
            markup=False,
            soft_wrap=True,
        )
    elif summary.best is None:
        lowest = summary.lowest_latency
        outcome = lowest.outcome if lowest is not None else None
        reached = (
            f"{outcome.latency_us / 1000:.2f} ms"
            if outcome is not None and outcome.latency_us
            else "nothing measurable"
        )
        held = " (the search found some; none held it re-measured)"
        console.print(
            f"no configuration of '{summary.model}' meets {budget}"
            f"{held if summary.remeasure is not None else ''}: the lowest latency reached "
            f"was {reached}; nothing was written",
            style="red",
            markup=False,
        )
    elif summary.written is not None:
        console.print(f"  written: {summary.written.config}", markup=False)
        if summary.written.backup:
            console.print(f"  previous config kept as {summary.written.backup}", markup=False)


def _throughput(trial: TrialRecord | None) -> float | None:
    return trial.outcome.throughput if trial is not None and trial.outcome is not None else None


def _row(summary: RunSummary, trial: TrialRecord | None) -> list[str]:
    """The trial's figures; a re-measured one's throughput and budget percentile with their
    range over the repeats."""
    if trial is None or trial.outcome is None:
        return ["-"] * len(COLUMNS)
    metrics = trial.outcome.metrics
    budget_key = f"p{summary.budget.percentile}_us"
    return [
        throughput_text(summary, trial.number, trial.outcome.throughput),
        *(
            latency_text(summary, trial.number, metrics.get(k))
            if k == budget_key
            else _ms(metrics.get(k))
            for k in ("p50_us", "p95_us", "p99_us")
        ),
        f"{metrics.get('concurrency', 0):.0f}",
        str(trial.number),
        escape(trial.label),
    ]


def _ms(value_us: float | None) -> str:
    return "-" if value_us is None or not math.isfinite(value_us) else f"{value_us / 1000:.2f}"
