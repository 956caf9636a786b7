"""The tuner's console: a progress bar per model (trials, best so far, time left) and the
as-written-vs-best table at the end."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from tuner.results import ModelReport
from tuner.search_types import ProgressEvent, TrialRecord


class TuneConsole:
    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self._progress: Progress | None = None
        self._tasks: dict[str, TaskID] = {}

    def __enter__(self) -> TuneConsole:
        self._progress = Progress(
            TextColumn("[bold]{task.fields[model]}"),
            BarColumn(),
            TextColumn("{task.completed:.0f}/{task.fields[total_text]} trials"),
            TextColumn("{task.fields[best]}"),
            TextColumn("{task.fields[left]}"),
            TimeElapsedColumn(),
            console=self.console,
            transient=False,
        )
        self._progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.__exit__(None, None, None)
            self._progress = None

    def note(self, message: str) -> None:
        self.console.log(escape(message))

    def error(self, message: str) -> None:
        """`error: message` in red, on one line however wide the terminal."""
        self.console.print(f"error: {message}", style="red", markup=False, soft_wrap=True)

    def warning(self, message: str) -> None:
        self.console.print(message, style="yellow", markup=False, soft_wrap=True)

    def update(self, model: str, event: ProgressEvent) -> None:
        progress = self._progress
        if progress is None:
            return
        if model not in self._tasks:
            self._tasks[model] = progress.add_task(
                model, total=event.total, model=model, total_text="?", best="", left=""
            )
        task = self._tasks[model]
        progress.update(
            task,
            completed=event.done,
            total=event.total,
            total_text=str(event.total) if event.total else "?",
            best=_best_text(event.best),
            left=f"{event.time_left_s:.0f}s left" if event.time_left_s is not None else "",
        )
        if event.kind == "trial_end" and event.trial is not None:
            self.console.log(escape(f"{model}: {_trial_text(event.trial)}"))

    def summary(self, report: ModelReport) -> None:
        table = Table(title=f"{report.model}: {report.budget}", title_justify="left")
        table.add_column("")
        for column in ("infer/s", "p50 ms", "p95 ms", "p99 ms", "concurrency", "config"):
            table.add_column(column, justify="right" if column != "config" else "left")
        for label, trial in (("as written", report.as_written), ("best", report.best)):
            table.add_row(label, *_row(trial))
        self.console.print(table)
        best, baseline = report.best, _throughput(report.as_written)
        if best is not None and best.outcome is not None and baseline:
            ratio = best.outcome.throughput / baseline
            self.console.print(f"  best / as written: {ratio:.2f}x the throughput")
        for field, old, new in report.changes:
            self.console.print(f"  {field}: {old} -> {new}", markup=False)
        if best is not None and not report.changes:
            self.console.print("  the configuration as written is the best found: nothing to write")
        if report.unmeasured_reason is not None:
            self.error(
                f"'{report.model}' could not be tuned: no configuration could be measured "
                f"({report.unmeasured_reason}); nothing was written"
            )
        elif report.best is None:
            lowest = report.search.lowest_latency
            reached = (
                f"{lowest.outcome.latency_us / 1000:.2f} ms"
                if lowest is not None and lowest.outcome and lowest.outcome.latency_us
                else "nothing measurable"
            )
            self.console.print(
                f"[red]no configuration of '{report.model}' meets {report.budget}: "
                f"the lowest latency reached was {reached}; nothing was written"
            )
        elif report.written:
            self.console.print(f"  written: {report.written['config']}")
            if report.written.get("backup"):
                self.console.print(f"  previous config kept as {report.written['backup']}")


def _throughput(trial: TrialRecord | None) -> float | None:
    return trial.outcome.throughput if trial is not None and trial.outcome is not None else None


def _best_text(best: TrialRecord | None) -> str:
    if best is None or best.outcome is None:
        return "best: -"
    return f"best: {best.outcome.throughput:,.0f} infer/s"


def _trial_text(trial: TrialRecord) -> str:
    key = trial.label
    outcome = trial.outcome
    if outcome is None:
        return f"trial {trial.number} {trial.state} {key}"
    latency = f"{outcome.latency_us / 1000:.2f} ms" if outcome.latency_us is not None else "-"
    verdict = "feasible" if trial.feasible else outcome.status
    text = f"trial {trial.number} [{key}] {outcome.throughput:,.1f} infer/s, {latency}: {verdict}"
    if outcome.message:
        text += f" ({outcome.message})"
    return text


def _row(trial: TrialRecord | None) -> list[str]:
    if trial is None or trial.outcome is None:
        return ["-"] * 6
    metrics = trial.outcome.metrics
    return [
        f"{trial.outcome.throughput:,.1f}",
        *(
            f"{metrics[k] / 1000:.2f}" if k in metrics else "-"
            for k in ("p50_us", "p95_us", "p99_us")
        ),
        f"{metrics.get('concurrency', 0):.0f}",
        trial.label,
    ]
