"""The run schema: summary.json round-trips through the dataclasses, the budget is numbers,
version 1 summaries still read, an unknown version is refused naming the file; the one console
renderer draws a summary for the live run and `autotune report` alike."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from tuner.budget import LatencyBudget
from tuner.candidate import Candidate
from tuner.duration import Duration
from tuner.errors import EXIT_NO_FEASIBLE, EXIT_NOT_TUNED, EXIT_OK, ReportError
from tuner.report.console import print_summary
from tuner.report.summary import ModelSummary, load_run
from tuner.results import trials_csv, write_model_report
from tuner.run_schema import (
    SCHEMA_VERSION,
    AccuracyResult,
    ConfigChange,
    PlatformInfo,
    RunSummary,
    VariantResult,
    WrittenFiles,
    read_summary,
)
from tuner.search_types import TrialOutcome, TrialRecord

METRICS = {"p50_us": 9_000.0, "p95_us": 12_000.0, "p99_us": 15_000.0, "concurrency": 4.0}


def _trial(number: int, throughput: float, p95_us: float, **kwargs: object) -> TrialRecord:
    metrics = {**METRICS, "p95_us": p95_us}
    outcome = TrialOutcome("ok", throughput, p95_us, metrics=metrics)
    values: dict[str, object] = {
        "number": number,
        "state": "COMPLETE",
        "candidate": Candidate({"max_batch_size": 8 * (number + 1), "instance_count": 1}),
        "outcome": outcome,
        "feasible": p95_us <= 20_000,
        "duration_s": 3.5,
    }
    values.update(kwargs)
    return TrialRecord(**values)  # type: ignore[arg-type]


def _summary() -> RunSummary:
    as_written = _trial(0, 100.0, 45_000.0, as_written=True)
    best = _trial(1, 250.5, 18_000.0)
    failed = TrialRecord(2, "FAIL", None, TrialOutcome.failed("did not load"), False, 1.0)
    return RunSummary(
        model="digits",
        budget=LatencyBudget(95, Duration.from_ms(20)),
        platform=PlatformInfo(cpu_count=2),
        study="digits-p95-20000us-optuna-abcd",
        stop_reason="3 trials done",
        trials=(as_written, best, failed),
        as_written=as_written,
        best=best,
        lowest_latency=best,
        as_written_config='name: "digits"\n',
        changes=(ConfigChange("max_queue_delay_microseconds", "40000", "0"),),
        written=WrittenFiles("repo/digits/config.pbtxt", "repo/digits/config.pbtxt.bak"),
        variants=(
            VariantResult("fp32", True, "reference", verdict="fp32: reference"),
            VariantResult(
                "int8",
                False,
                "static QDQ",
                verdict="int8 excluded, accuracy: drop 0.2 > 0.01",
                accuracy=AccuracyResult(
                    "top1_agreement", 0.8, 0.2, 0.01, False, "drop 0.2 > 0.01", "random"
                ),
            ),
        ),
        validation_source="random",
        space=("max_batch_size: 8, 16",),
    )


def test_a_run_summary_round_trips_through_json() -> None:
    summary = _summary()
    data = json.loads(json.dumps(summary.to_json()))
    assert data["schema_version"] == SCHEMA_VERSION
    assert RunSummary.from_json(data) == summary


def test_the_budget_is_written_and_read_as_numbers(tmp_path: Path) -> None:
    write_model_report(_summary(), tmp_path)
    data = json.loads((tmp_path / "summary.json").read_text())
    assert data["budget"] == {"percentile": 95, "limit_us": 20_000.0}
    read = read_summary(tmp_path)
    assert read.budget == LatencyBudget(95, Duration(20_000.0))
    assert read.budget.describe() == "p95 <= 20 ms"
    report = ModelSummary.load(tmp_path)
    assert (report.percentile, report.limit_us) == (95, 20_000.0)
    trials = json.loads((tmp_path / "trials.json").read_text())
    assert trials == data["trials"]
    assert (tmp_path / "trials.csv").read_text() == trials_csv(read.trials)


def test_an_unknown_schema_version_is_refused_naming_the_file(tmp_path: Path) -> None:
    data = _summary().to_json() | {"schema_version": SCHEMA_VERSION + 1}
    (tmp_path / "summary.json").write_text(json.dumps(data))
    with pytest.raises(ReportError) as caught:
        load_run(tmp_path)
    message = str(caught.value)
    assert str(tmp_path / "summary.json") in message
    assert f"unknown schema_version {SCHEMA_VERSION + 1}" in message
    assert "another version of autotune" in message


def test_a_file_that_is_no_summary_names_what_is_missing(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text(json.dumps({"schema_version": SCHEMA_VERSION}))
    with pytest.raises(ReportError, match=r"summary.json is not a tuning summary: it has no"):
        read_summary(tmp_path)


def test_version_1_summaries_still_read(tmp_path: Path) -> None:
    """Before schema_version: the budget as text, trial 0 possibly named `default`."""
    data = _summary().to_json()
    del data["schema_version"]
    data["budget"] = "p95 <= 20 ms"
    data["default"] = data.pop("as_written")
    (tmp_path / "summary.json").write_text(json.dumps(data))
    read = read_summary(tmp_path)
    assert read.budget == LatencyBudget(95, Duration.from_ms(20))
    assert read.as_written is not None and read.as_written.number == 0
    assert read == _summary()
    data["budget"] = "whatever"
    (tmp_path / "summary.json").write_text(json.dumps(data))
    with pytest.raises(ReportError, match="is not a tuning summary: budget 'whatever'"):
        read_summary(tmp_path)


def test_exit_codes_follow_the_outcome() -> None:
    summary = _summary()
    assert summary.exit_code == EXIT_OK and summary.unmeasured_reason is None
    missed = RunSummary.from_json(summary.to_json() | {"best": None})
    assert missed.exit_code == EXIT_NO_FEASIBLE


def test_a_run_whose_every_candidate_was_refused_was_not_tuned() -> None:
    """A refused candidate is a pruned trial with no figure: when every trial was refused, no
    configuration was measured, and the run says so with the server's reason; a trial pruned
    over budget was measured, so such a run only found nothing feasible."""
    refused = TrialOutcome("pruned", message="the server refused the config: bad parameter")
    trials = tuple(
        TrialRecord(n, "PRUNED", Candidate({"instance_count": n + 1}), refused, False, 0.1)
        for n in range(2)
    )
    summary = replace(
        _summary(), trials=trials, as_written=trials[0], best=None, lowest_latency=None
    )
    assert summary.exit_code == EXIT_NOT_TUNED
    assert summary.unmeasured_reason == "trial 0: the server refused the config: bad parameter"
    over_budget = TrialOutcome("pruned", 10.0, 50_000.0, message="over budget at concurrency 1")
    measured = replace(summary, trials=(*trials, replace(trials[0], number=2, outcome=over_budget)))
    assert measured.exit_code == EXIT_NO_FEASIBLE and measured.unmeasured_reason is None


def test_one_renderer_prints_the_summary() -> None:
    console = Console(width=200, record=True, color_system=None)
    print_summary(_summary(), console)
    text = console.export_text()
    assert "digits: p95 <= 20 ms (2 CPU cores, no GPU; 3 trials, 1 feasible)" in text
    assert "as written" in text and "best" in text and "250.5" in text
    assert "best / as written throughput: 2.50x" in text
    assert "max_queue_delay_microseconds: 40000 -> 0" in text
    assert "int8 excluded, accuracy" in text
    assert "written: repo/digits/config.pbtxt" in text
    assert "previous config kept as repo/digits/config.pbtxt.bak" in text

    console = Console(width=200, record=True, color_system=None)
    missed = RunSummary.from_json(_summary().to_json() | {"best": None, "changes": []})
    print_summary(missed, console)
    text = console.export_text()
    assert "no configuration of 'digits' meets p95 <= 20 ms" in text
    assert "the lowest latency reached was 18.00 ms; nothing was written" in text


def test_platform_names_its_gpus_and_whether_they_were_usable() -> None:
    assert PlatformInfo(2).describe() == "2 CPU cores, no GPU"
    h200 = PlatformInfo(16, gpu=True, gpu_names=("NVIDIA H200",))
    assert h200.describe() == "16 CPU cores, 1 GPU (NVIDIA H200)"
    unusable = PlatformInfo(16, gpu=False, gpu_names=("NVIDIA L4", "NVIDIA L4"))
    assert unusable.describe() == (
        "16 CPU cores, 2 GPUs (NVIDIA L4, NVIDIA L4), not usable by the model's backend here"
    )
    for info in (PlatformInfo(2), h200, unusable):
        assert PlatformInfo.from_json(info.to_json()) == info
    assert PlatformInfo.from_json({"cpu_count": 2, "gpu": False}) == PlatformInfo(2)  # older files
