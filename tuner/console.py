"""The tuner's console: a progress bar per model (trials, best so far, time left) and, at
the end of each model, its summary (tuner/report/console.py, as `autotune report` prints it)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from tuner.report.console import print_summary
from tuner.run_schema import RunSummary
from tuner.search_types import ProgressEvent, TrialRecord


class TuneConsole:
    """The live run's terminal, on stderr: a context manager that shows the progress bars while
    it is open; `note`, `error` and `warning` print above them."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True, log_path=False)  # no "console.py:41" column
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
            left=f"{event.time_left.s:.0f}s left" if event.time_left is not None else "",
        )
        if event.kind == "trial_end" and event.trial is not None:
            self.console.log(escape(f"{model}: {_trial_text(event.trial)}"))

    def summary(self, summary: RunSummary) -> None:
        """The model's summary, as `autotune report` prints it."""
        print_summary(summary, self.console)


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
