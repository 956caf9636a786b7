"""What a tuning run leaves in its report folder: every trial (CSV and JSON) and a summary
(JSON), all in the run schema (tuner/run_schema.py) the reports read back."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path

from common.atomic import write_text_atomic
from tuner.budget import LatencyBudget
from tuner.precision import PrecisionVariant
from tuner.run_schema import (
    SUMMARY_FILE,
    AccuracyResult,
    PlatformInfo,
    RunSummary,
    VariantResult,
    summary_json,
    trials_json,
)
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


def run_summary(
    model: str,
    budget: LatencyBudget,
    platform: PlatformInfo,
    search: SearchResult,
    variants: Sequence[PrecisionVariant],
    as_written_config: str = "",
    validation_source: str = "",
    space: Sequence[str] = (),
) -> RunSummary:
    """One model's tuning result in the run schema (nothing changed or written yet: the run
    adds `changes` and `written` with `dataclasses.replace`)."""
    return RunSummary(
        model=model,
        budget=budget,
        platform=platform,
        study=search.study_name,
        stop_reason=search.stop_reason,
        trials=tuple(search.trials),
        as_written=next((t for t in search.trials if t.as_written), None),
        best=search.best,
        lowest_latency=search.lowest_latency,
        as_written_config=as_written_config,
        variants=tuple(variant_result(v) for v in variants),
        validation_source=validation_source,
        space=tuple(space),
    )


def variant_result(variant: PrecisionVariant) -> VariantResult:
    """A precision variant as the run schema records it."""
    accuracy = variant.accuracy
    return VariantResult(
        precision=variant.precision,
        usable=variant.usable,
        method=variant.method,
        error=variant.error,
        cached=variant.cached,
        build_seconds=variant.build_seconds,
        verdict=variant.verdict,
        accuracy=None
        if accuracy is None
        else AccuracyResult(
            metric=str(accuracy.metric),
            value=accuracy.value,
            drop=accuracy.drop,
            limit=accuracy.limit,
            passed=accuracy.passed,
            reason=accuracy.reason,
            source=accuracy.source,
        ),
    )


def trials_csv(trials: Sequence[TrialRecord]) -> str:
    """trials.csv: one row per trial, TRIAL_COLUMNS (empty cells where a trial has no outcome)."""
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


def write_model_report(summary: RunSummary, folder: Path) -> list[Path]:
    """trials.csv, trials.json and summary.json in `folder` (atomic writes)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / "trials.csv", folder / "trials.json", folder / SUMMARY_FILE]
    write_text_atomic(paths[0], trials_csv(summary.trials))
    write_text_atomic(paths[1], trials_json(summary.trials))
    write_text_atomic(paths[2], summary_json(summary))
    return paths
