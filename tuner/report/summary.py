"""Reading a tuning run back from its report folder: one `ModelSummary` per model folder
(summary.json in the run schema, tuner/run_schema.py), in the shape the renderers need."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from tuner.errors import ReportError
from tuner.run_schema import (
    SUMMARY_FILE,
    ConfigChange,
    RunSummary,
    VariantResult,
    WrittenFiles,
    read_summary,
)
from tuner.search_types import TrialOutcome, TrialRecord, trial_label

__all__ = ["SUMMARY_FILE", "ModelSummary", "ReportError", "TrialView", "load_run"]


@dataclass(frozen=True, slots=True)
class TrialView:
    """One trial as the report draws it: its configuration key and, when measured, throughput
    and its latency at the budget's percentile."""

    number: int
    state: str
    feasible: bool
    key: str
    outcome: TrialOutcome | None
    latency_us: float | None  # at the budget's percentile
    duration_s: float | None
    reused_from: int | None
    as_written: bool = False  # the model's config exactly as written (trial 0)

    @classmethod
    def of(cls, trial: TrialRecord, percentile: int) -> TrialView:
        outcome = trial.outcome
        latency = None
        if outcome is not None:
            latency = _finite(outcome.metrics.get(f"p{percentile}_us"))
            if latency is None:
                latency = _finite(outcome.latency_us)
        return cls(
            number=trial.number,
            state=trial.state,
            feasible=trial.feasible,
            key=trial.candidate.key if trial.candidate is not None else "",
            outcome=outcome,
            latency_us=latency,
            duration_s=trial.duration_s,
            reused_from=trial.reused_from,
            as_written=trial.as_written,
        )

    @property
    def label(self) -> str:
        """The configuration in words: its key, or "as written" for the model's own."""
        return trial_label(self.key, self.as_written)

    @property
    def throughput(self) -> float | None:
        return self.outcome.throughput if self.outcome is not None else None

    @property
    def measured(self) -> bool:
        """Has a throughput and a latency to plot."""
        return self.latency_us is not None and bool(self.throughput)

    def metric(self, name: str) -> float | None:
        return _finite(self.outcome.metrics.get(name)) if self.outcome is not None else None


@dataclass(frozen=True, slots=True)
class ModelSummary:
    """A model's tuning run as read from its folder (`run`, in the run schema), with its
    trials as the report draws them."""

    folder: Path
    run: RunSummary
    trials: tuple[TrialView, ...]
    as_written: TrialView | None  # the model's config as written, which the best is compared with
    best: TrialView | None
    lowest_latency: TrialView | None

    @classmethod
    def load(cls, folder: Path) -> ModelSummary:
        """`folder`/summary.json; ReportError naming the file when it cannot be read."""
        return cls.of(folder, read_summary(folder))

    @classmethod
    def of(cls, folder: Path, run: RunSummary) -> ModelSummary:
        percentile = run.budget.percentile

        def view(trial: TrialRecord | None) -> TrialView | None:
            return None if trial is None else TrialView.of(trial, percentile)

        return cls(
            folder=folder,
            run=run,
            trials=tuple(TrialView.of(t, percentile) for t in run.trials),
            as_written=view(run.as_written),
            best=view(run.best),
            lowest_latency=view(run.lowest_latency),
        )

    @property
    def model(self) -> str:
        return self.run.model

    @property
    def budget(self) -> str:
        """The budget in words, e.g. "p95 <= 20 ms"."""
        return self.run.budget.describe()

    @property
    def percentile(self) -> int:
        return self.run.budget.percentile

    @property
    def limit_us(self) -> float:
        return self.run.budget.limit.us

    @property
    def study(self) -> str:
        return self.run.study

    @property
    def anchor(self) -> str:
        """An id for the model's part of a page."""
        return "model-" + re.sub(r"[^A-Za-z0-9_-]+", "-", self.model)

    @property
    def changes(self) -> tuple[ConfigChange, ...]:
        return self.run.changes

    @property
    def variants(self) -> tuple[VariantResult, ...]:
        return self.run.variants

    @property
    def written(self) -> WrittenFiles | None:
        return self.run.written

    @property
    def platform(self) -> str:
        return self.run.platform.describe()

    @property
    def server(self) -> str:
        """The server tuned ("-" for a summary written before the reports named it)."""
        return self.run.server.describe() if self.run.server is not None else "-"


def load_run(run_dir: Path) -> list[ModelSummary]:
    """The models of a run: `run_dir` is a --report-dir (one folder per model) or one model's
    folder."""
    if not run_dir.is_dir():
        raise ReportError(f"{run_dir} is not a folder")
    if (run_dir / SUMMARY_FILE).is_file():
        return [ModelSummary.load(run_dir)]
    folders = sorted(p for p in run_dir.iterdir() if (p / SUMMARY_FILE).is_file())
    if not folders:
        raise ReportError(
            f"no {SUMMARY_FILE} in {run_dir} or its folders: give a tuning run's --report-dir "
            "(one folder per model) or one model's folder"
        )
    return [ModelSummary.load(folder) for folder in folders]


def _finite(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return float(value)
