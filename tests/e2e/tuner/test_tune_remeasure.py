"""Results that hold: the tuner re-measures its leaders interleaved and reports the median of
the winner's rounds (the statistic that chose it); the config it writes holds the winner's
values, and a fresh server on it serves the reported load without an error. (How close the
re-served figures come to the reported ones: benchmarks/written_config_holds.py.)"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from pathlib import Path

from analyzer.api import LoadLevel, LoadOptions, MeasureSettings, measure
from serve.config.model_config import read_config_file
from tests.e2e.conftest import autotune
from tests.support.server_process import start_server, stop_server

BUDGET_MS = 100  # generous: the operating point sits well inside it, whatever the noise
TRIAL_INTERVAL_MS = 300
REPEATS = 3  # the tuner's re-measure rounds
# What the tuner's re-measure uses (windows twice the trials').
CHECK_WINDOWS = MeasureSettings(
    measurement_interval_ms=2 * TRIAL_INTERVAL_MS,
    stability_percentage=10.0,
    max_trials=8,
    warmup_request_count=20,
)


def test_the_written_config_is_the_winner_and_serves_the_reported_load(
    tmp_path: Path, repository_with: Callable[..., Path]
) -> None:
    repository = repository_with("digits")
    result = autotune(
        tmp_path,
        "--latency-p95",
        f"{BUDGET_MS}ms",
        "-m",
        "digits",
        "--model-repository",
        str(repository),
        "--trials",
        "2",
        "--precision",
        "fp32",
        "--max-batch-size-cap",
        "32",
        "--measurement-interval",
        str(TRIAL_INTERVAL_MS),
        "--seed",
        "1",
        "--remeasure-top",
        "2",
        "--remeasure-repeats",
        str(REPEATS),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads((tmp_path / "reports" / "digits" / "summary.json").read_text())
    remeasure = summary["remeasure"]
    best = summary["best"]
    assert remeasure["winner"] == best["number"], remeasure
    winner = next(c for c in remeasure["candidates"] if c["trial"] == best["number"])
    assert len(winner["throughputs"]) == remeasure["rounds"] >= 1
    reported = best["outcome"]["throughput"]
    assert reported == statistics.median(winner["throughputs"])  # what chose the winner
    concurrency = int(best["outcome"]["metrics"]["concurrency"])
    assert "re-measured" in result.stderr

    # The config written is the one that was measured: the winner's values are in it (or, when
    # the config as written won, it is untouched).
    written = read_config_file(repository / "digits" / "config.pbtxt")
    candidate = best["candidate"] or {}
    if best["as_written"]:
        assert not (repository / "digits" / "config.pbtxt.bak").exists()
    for field, value in candidate.items():
        if field == "max_batch_size":
            assert written.max_batch_size == value
        elif field == "instance_count":
            assert sum(group.count for group in written.instance_group) == value
        elif field == "max_queue_delay_microseconds" and candidate.get("dynamic_batching"):
            assert written.dynamic_batching.max_queue_delay_microseconds == value
        elif field == "intra_op_thread_count":
            assert written.parameters[field].string_value == str(value)

    # Served again by a fresh server at the reported load, it answers every request. How close
    # its figures come to the reported ones is a timing, which tests do not assert:
    # `python benchmarks/written_config_holds.py` measures it, with repeats.
    server = start_server(repository, tmp_path / "server.log")
    try:
        options = LoadOptions(url=server.url, model="digits")
        again = measure(options, LoadLevel(concurrency=concurrency), CHECK_WINDOWS)
    finally:
        stop_server(server)
    assert again.error_count == 0, again.errors
    assert again.throughput > 0 and again.latency_p95_us > 0
