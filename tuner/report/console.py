"""`autotune report` in the terminal: per model, the outcome, the config as written vs the
best, the config diff and the precision verdicts (rich)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tuner.report.summary import ModelSummary, TrialView


def print_run(summaries: Sequence[ModelSummary], console: Console) -> None:
    for summary in summaries:
        print_model(summary, console)


def print_model(summary: ModelSummary, console: Console) -> None:
    trials = summary.trials
    feasible = sum(t.feasible for t in trials)
    table = Table(
        title=f"{escape(summary.model)}: {escape(summary.budget)} ({summary.platform}; "
        f"{len(trials)} trials, {feasible} feasible)",
        title_justify="left",
    )
    table.add_column("")
    for column in ("infer/s", "p50 ms", "p95 ms", "p99 ms", "concurrency", "trial"):
        table.add_column(column, justify="right")
    for label, trial in (("as written", summary.as_written), ("best", summary.best)):
        table.add_row(label, *_row(trial), style="bold" if label == "best" else None)
    console.print(table)
    for label, trial in (("as written", summary.as_written), ("best", summary.best)):
        if trial is not None and trial.key:  # the config as written may be no point of the space
            console.print(f"  {label}: {escape(trial.key)}")
    best, as_written = summary.best, summary.as_written
    if best is None or not best.throughput:
        console.print(f"  [red]no configuration meets {escape(summary.budget)}[/]")
    elif as_written is not None and as_written.throughput:
        console.print(
            f"  best / as written throughput: [bold]{best.throughput / as_written.throughput:.2f}x"
        )
    for field, old, new in summary.changes:
        console.print(f"  {escape(field)}: [red strike]{escape(old)}[/] -> [green]{escape(new)}[/]")
    for variant in summary.variants:
        verdict = str(variant.get("verdict") or variant.get("precision"))
        accuracy = variant.get("accuracy")
        failed = variant.get("error") or (accuracy is not None and not accuracy.get("passed"))
        console.print(f"  [{'red' if failed else 'dim'}]{escape(verdict)}[/]")


def _row(trial: TrialView | None) -> list[str]:
    if trial is None or trial.outcome is None:
        return ["-"] * 6
    return [
        f"{trial.outcome.throughput:,.1f}",
        *(_ms(trial.metric(k)) for k in ("p50_us", "p95_us", "p99_us")),
        f"{trial.metric('concurrency') or 0:.0f}",
        str(trial.number),
    ]


def _ms(value_us: float | None) -> str:
    return "-" if value_us is None else f"{value_us / 1000:.2f}"
