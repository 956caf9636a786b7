"""What a tuning run leaves in its report folder: every trial (CSV and JSON) and a summary
(JSON) for the reports to render, plus the as-written-vs-best comparison."""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.atomic import write_text_atomic
from tuner.errors import EXIT_NO_FEASIBLE, EXIT_NOT_TUNED, EXIT_OK
from tuner.precision import PrecisionVariant
from tuner.search_types import SearchResult, TrialRecord

TRIAL_COLUMNS = [
    "number",
    "state",
    "feasible",
    "as_written",
    "candidate",
    "throughput",
    "latency_us",
    "concurrency",
    "p50_us",
    "p90_us",
    "p95_us",
    "p99_us",
    "accuracy_ok",
    "duration_s",
    "reused_from",
    "message",
]


@dataclass(slots=True)
class ModelReport:
    """One model's tuning result; `to_json` is the summary file's content. `as_written` is
    the trial of the model's config exactly as written (`as_written_config`), which the best
    is compared with."""

    model: str
    budget: str
    platform: dict[str, Any]
    search: SearchResult
    as_written: TrialRecord | None
    variants: list[PrecisionVariant]
    as_written_config: str = ""
    changes: list[tuple[str, str, str]] = field(default_factory=list)
    written: dict[str, str] = field(default_factory=dict)
    validation_source: str = ""
    space: list[str] = field(default_factory=list)

    @property
    def best(self) -> TrialRecord | None:
        return self.search.best

    @property
    def exit_code(self) -> int:
        """0 with a best config; 3 when configs were measured but none met the limits; 1 when
        none could be measured at all (the model does not load, say)."""
        if self.best is not None:
            return EXIT_OK
        return EXIT_NO_FEASIBLE if self.unmeasured_reason is None else EXIT_NOT_TUNED

    @property
    def unmeasured_reason(self) -> str | None:
        """Why no trial gave a measurement (the first failure's message), or None when some
        trial did."""
        trials = self.search.trials
        if any(t.outcome is not None and t.outcome.status != "failed" for t in trials):
            return None
        failed = next((t for t in trials if t.outcome is not None and t.outcome.message), None)
        if failed is None or failed.outcome is None:
            return self.search.stop_reason or "no trial ran"
        return f"trial {failed.number}: {failed.outcome.message}"

    def to_json(self) -> dict[str, Any]:
        lowest = self.search.lowest_latency
        return {
            "model": self.model,
            "budget": self.budget,
            "platform": self.platform,
            "study": self.search.study_name,
            "stop_reason": self.search.stop_reason,
            "space": self.space,
            "as_written": _trial_json(self.as_written),
            "as_written_config": self.as_written_config,
            "best": _trial_json(self.best),
            "lowest_latency": _trial_json(lowest),
            "changes": [{"field": f, "old": o, "new": n} for f, o, n in self.changes],
            "written": self.written,
            "validation_source": self.validation_source,
            "variants": [_variant_json(v) for v in self.variants],
            "trials": [_trial_json(t) for t in self.search.trials],
        }


def _trial_json(trial: TrialRecord | None) -> dict[str, Any] | None:
    if trial is None:
        return None
    return {
        "number": trial.number,
        "state": trial.state,
        "feasible": trial.feasible,
        "candidate": trial.candidate.to_json() if trial.candidate is not None else None,
        "key": trial.candidate.key if trial.candidate is not None else None,
        "as_written": trial.as_written,
        "outcome": trial.outcome.to_json() if trial.outcome is not None else None,
        "duration_s": trial.duration_s,
        "reused_from": trial.reused_from,
    }


def _variant_json(variant: PrecisionVariant) -> dict[str, Any]:
    accuracy = variant.accuracy
    return {
        "precision": variant.precision,
        "usable": variant.usable,
        "method": variant.method,
        "error": variant.error,
        "cached": variant.cached,
        "build_seconds": variant.build_seconds,
        "verdict": variant.verdict,
        "accuracy": None
        if accuracy is None
        else {
            "metric": str(accuracy.metric),
            "value": _finite(accuracy.value),
            "drop": _finite(accuracy.drop),
            "limit": accuracy.limit,
            "passed": accuracy.passed,
            "reason": accuracy.reason,
            "source": accuracy.source,
        },
    }


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def trials_csv(trials: list[TrialRecord]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(TRIAL_COLUMNS)
    for trial in trials:
        outcome = trial.outcome
        metrics = dict(outcome.metrics) if outcome is not None else {}
        writer.writerow(
            [
                trial.number,
                trial.state,
                trial.feasible,
                trial.as_written,
                trial.candidate.key if trial.candidate is not None else "",
                f"{outcome.throughput:.2f}" if outcome is not None else "",
                _number(outcome.latency_us) if outcome is not None else "",
                _number(metrics.get("concurrency")),
                *(_number(metrics.get(k)) for k in ("p50_us", "p90_us", "p95_us", "p99_us")),
                outcome.accuracy_ok if outcome is not None else "",
                _number(trial.duration_s),
                "" if trial.reused_from is None else trial.reused_from,
                outcome.message if outcome is not None else "",
            ]
        )
    return out.getvalue()


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}"


def write_model_report(report: ModelReport, folder: Path) -> list[Path]:
    """trials.csv, trials.json and summary.json in `folder` (atomic writes)."""
    folder.mkdir(parents=True, exist_ok=True)
    summary = report.to_json()
    paths = [folder / "trials.csv", folder / "trials.json", folder / "summary.json"]
    write_text_atomic(paths[0], trials_csv(report.search.trials))
    write_text_atomic(paths[1], json.dumps(summary["trials"], indent=2) + "\n")
    write_text_atomic(paths[2], json.dumps(summary, indent=2) + "\n")
    return paths
