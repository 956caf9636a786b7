"""Reading a tuning run back from its report folder: one `ModelSummary` per model folder
(summary.json, as tuner/results.py writes it), in the shape the renderers need."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner.budget import parse_duration_us
from tuner.errors import TunerError
from tuner.search_types import TrialOutcome, trial_label

SUMMARY_FILE = "summary.json"
_BUDGET = re.compile(r"^p(\d+)\s*<=\s*(.+)$")


class ReportError(TunerError):
    """The run cannot be reported (no summary, or a summary that cannot be read)."""


@dataclass(frozen=True, slots=True)
class TrialView:
    """One trial: its configuration key and, when measured, throughput and latencies."""

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
    def from_json(cls, data: Mapping[str, Any], percentile: int) -> TrialView:
        raw = data.get("outcome")
        outcome = TrialOutcome.from_json(raw) if raw else None
        latency = None
        if outcome is not None:
            latency = _finite(outcome.metrics.get(f"p{percentile}_us"))
            if latency is None:
                latency = _finite(outcome.latency_us)
        return cls(
            number=int(data["number"]),
            state=str(data.get("state", "")),
            feasible=bool(data.get("feasible")),
            key=str(data.get("key") or ""),
            outcome=outcome,
            latency_us=latency,
            duration_s=data.get("duration_s"),
            reused_from=data.get("reused_from"),
            as_written=bool(data.get("as_written", False)),
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
    """A model's tuning result as read from its folder."""

    folder: Path
    model: str
    budget: str  # e.g. "p95 <= 20 ms"
    percentile: int
    limit_us: float | None  # None when the budget text cannot be read back
    study: str
    data: Mapping[str, Any]  # summary.json as written (platform, changes, variants, ...)
    trials: tuple[TrialView, ...]
    as_written: TrialView | None  # the model's config as written, which the best is compared with
    best: TrialView | None
    lowest_latency: TrialView | None

    @classmethod
    def load(cls, folder: Path) -> ModelSummary:
        path = folder / SUMMARY_FILE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ReportError(f"cannot read {path}: {exc}") from None
        try:
            return cls.from_json(folder, data)
        except KeyError as exc:
            raise ReportError(f"{path} is not a tuning summary: it has no {exc}") from None
        except (TypeError, ValueError) as exc:
            raise ReportError(f"{path} is not a tuning summary: {exc}") from None

    @classmethod
    def from_json(cls, folder: Path, data: Mapping[str, Any]) -> ModelSummary:
        budget = str(data["budget"])
        percentile, limit_us = parse_budget(budget)

        def view(entry: Mapping[str, Any] | None) -> TrialView | None:
            return None if entry is None else TrialView.from_json(entry, percentile)

        return cls(
            folder=folder,
            model=str(data["model"]),
            budget=budget,
            percentile=percentile,
            limit_us=limit_us,
            study=str(data.get("study") or ""),
            data=data,
            trials=tuple(TrialView.from_json(t, percentile) for t in data.get("trials", [])),
            # summaries written before the config as written was measured name it "default"
            as_written=view(data.get("as_written", data.get("default"))),
            best=view(data.get("best")),
            lowest_latency=view(data.get("lowest_latency")),
        )

    @property
    def anchor(self) -> str:
        """An id for the model's part of a page."""
        return "model-" + re.sub(r"[^A-Za-z0-9_-]+", "-", self.model)

    @property
    def changes(self) -> list[tuple[str, str, str]]:
        return [(str(c["field"]), str(c["old"]), str(c["new"])) for c in self.data["changes"]]

    @property
    def variants(self) -> list[Mapping[str, Any]]:
        return list(self.data.get("variants") or [])

    @property
    def written(self) -> Mapping[str, str]:
        return self.data.get("written") or {}

    @property
    def platform(self) -> str:
        platform = self.data.get("platform") or {}
        parts = [f"{platform.get('cpu_count', '?')} CPU cores"]
        parts.append(f"GPU: {platform['gpu']}" if platform.get("gpu") else "no GPU")
        return ", ".join(parts)


def parse_budget(text: str) -> tuple[int, float | None]:
    """(percentile, limit in us) from 'p95 <= 20 ms'; the limit is None if unreadable."""
    match = _BUDGET.match(text.strip())
    if match is None:
        return 95, None
    try:
        return int(match.group(1)), parse_duration_us(match.group(2).replace(" ", ""))
    except ValueError:
        return int(match.group(1)), None


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
