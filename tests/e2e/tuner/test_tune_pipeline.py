"""`autotune --latency-p95 ... --model text_embedding`: an ensemble tuned as a pipeline end to
end (its composing models searched jointly, measured through the ensemble, written back all
or none), then served and measured again through the ensemble."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from analyzer.api import LoadLevel, LoadOptions, MeasureSettings, measure
from serve.config.model_config import read_config_file
from tests.e2e.conftest import autotune
from tests.support.server_process import start_server, stop_server

PIPELINE = "text_embedding"
STEPS = ("minilm_tokenizer", "minilm_encoder", "minilm_pooling")
# The configs as written hold each request 70 ms in each of the three steps' queues: never
# below 210 ms end to end. The budget sits well under that and well over what one request
# through a tuned pipeline takes (~30 ms at concurrency 1 on two quiet cores), so the tuner's
# re-measure can back off its load when the other test process slows this one down (at
# 60 ms, one CI run's only candidate re-measured at 86 ms at concurrency 1 and was dropped).
AS_WRITTEN_FLOOR_MS = 3 * 70
BUDGET_MS = 100


def _slow(config_text: str) -> str:
    """The step's config with a 70 ms queue delay waiting for full batches: alone it misses
    the budget, and the tuner never proposes a delay that long, so every configuration the
    search measures changes every step, and the best one is written for all three."""
    config = config_text.replace("dynamic_batching { }", "dynamic_batching {\n}")
    head, _, rest = config.partition("dynamic_batching {")
    _, _, tail = rest.partition("}")
    max_batch = next(
        line.split(":")[1].strip() for line in config.splitlines() if "max_batch_size" in line
    )
    return (
        f"{head}dynamic_batching {{ preferred_batch_size: [ {max_batch} ] "
        f"max_queue_delay_microseconds: 70000 }}{tail}"
    )


def test_tuning_the_text_pipeline_writes_every_step_and_meets_the_budget(
    tmp_path: Path, repository_with: Callable[..., Path], bundled_repository: Path
) -> None:
    configs = {
        step: _slow((bundled_repository / step / "config.pbtxt").read_text()) for step in STEPS
    }
    repository = repository_with(PIPELINE, *STEPS, configs=configs)
    ensemble_before = (repository / PIPELINE / "config.pbtxt").read_bytes()
    result = autotune(
        tmp_path,
        "--latency-p95",
        f"{BUDGET_MS}ms",
        "-m",
        PIPELINE,
        "--model-repository",
        str(repository),
        "--trials",
        "2",
        "--precision",
        "fp32",
        "--measurement-interval",
        "300",
        "--seed",
        "1",
        # Measured again below at the reported load: a light re-measure makes that figure hold.
        *("--remeasure-top", "2", "--remeasure-repeats", "1"),
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "minilm_tokenizer -> minilm_encoder -> minilm_pooling" in output
    assert "candidates in the joint search space" in output

    # Every composing model's config was written (the old one kept), the ensemble's was not.
    assert (repository / PIPELINE / "config.pbtxt").read_bytes() == ensemble_before
    assert not (repository / PIPELINE / "config.pbtxt.bak").exists()
    for step in STEPS:
        assert (repository / step / "config.pbtxt.bak").read_text() == configs[step]
        tuned = read_config_file(repository / step / "config.pbtxt")
        assert tuned.dynamic_batching.max_queue_delay_microseconds < 70_000 or not (
            tuned.HasField("dynamic_batching")
        )
        assert tuned.max_batch_size == 0 or tuned.max_batch_size >= 64 or step == STEPS[1]

    summary = json.loads((tmp_path / "reports" / PIPELINE / "summary.json").read_text())
    assert summary["as_written"]["feasible"] is False  # the slow configs miss the budget
    best = summary["best"]
    assert best["feasible"] is True
    assert [s["model"] for s in summary["pipeline"]] == list(STEPS)
    for step in summary["pipeline"]:
        assert step["written"]["config"].endswith(f"{step['model']}/config.pbtxt")
        assert step["changes"], step
    metrics = best["outcome"]["metrics"]
    for step in STEPS:  # each step's share comes from the ensemble measurement's breakdown
        assert metrics[f"step.{step}.compute_us"] > 0, metrics
    report = (tmp_path / "reports" / "report.html").read_text()
    assert f'id="model-{PIPELINE}-pipeline"' in report  # the steps' table

    concurrency = int(metrics["concurrency"])
    server = start_server(repository, tmp_path / "server.log")
    try:
        again = measure(
            LoadOptions(url=server.url, model=PIPELINE),
            LoadLevel(concurrency=concurrency),
            MeasureSettings(measurement_interval_ms=1000, stability_percentage=30, max_trials=15),
        )
    finally:
        stop_server(server)
    # The tuner chose the highest load whose p95 through the ensemble stayed within the
    # budget, so measured again there p95 lands around it, either side by noise, and the
    # tests run two at a time on the same cores (80 ms against a 60 ms budget once). The
    # configs as written can never go below their queues' floor, so that tells the two apart.
    assert again.error_count == 0, again.errors
    assert again.latency_p95_us < AS_WRITTEN_FLOOR_MS * 1000, again


def test_a_stateful_model_is_skipped_with_the_reason(
    tmp_path: Path, repository_with: Callable[..., Path]
) -> None:
    repository = repository_with("accumulator")
    result = autotune(
        tmp_path,
        "--latency-p95",
        "50ms",
        "-m",
        "accumulator",
        "--model-repository",
        str(repository),
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "skipping 'accumulator': a stateful model (sequence_batching)" in result.stderr
    assert not (repository / "accumulator" / "config.pbtxt.bak").exists()
