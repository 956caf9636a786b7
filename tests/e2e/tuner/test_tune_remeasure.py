"""Results that hold: the configuration the tuner writes, served again by a fresh server and
measured at the load it reported, meets the budget and delivers at least 95% of the reported
throughput (the lowest of the interleaved re-measures, not the search's best short window)."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from pathlib import Path

from analyzer.api import LoadLevel, LoadOptions, MeasureSettings, measure
from tests.e2e.conftest import autotune
from tests.support.server_process import start_server, stop_server

BUDGET_MS = 100  # generous: the operating point sits well inside it, whatever the noise
TRIAL_INTERVAL_MS = 300
REPEATS = 3
# What the tuner's re-measure uses (windows twice the trials'), so that the check below
# measures the written config the way its reported figure was measured.
CHECK_WINDOWS = MeasureSettings(
    measurement_interval_ms=2 * TRIAL_INTERVAL_MS,
    stability_percentage=10.0,
    max_trials=8,
    warmup_request_count=20,
)


def test_the_written_config_served_again_holds_the_reported_figures(
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
    assert reported == min(winner["throughputs"])  # what held in every interleaved round
    concurrency = int(best["outcome"]["metrics"]["concurrency"])
    assert "re-measured" in result.stderr

    # The repository as the run left it (the winner written, or the config as written kept
    # when it won), in a fresh server, measured at the reported load as often as the tuner
    # re-measured it: the median is judged, as the reported figure is a median.
    server = start_server(repository, tmp_path / "server.log")
    try:
        options = LoadOptions(url=server.url, model="digits")
        # The tuner re-measured a server that had been serving for minutes: one measurement
        # first warms this fresh one (its first windows pay for allocations and first runs).
        measure(options, LoadLevel(concurrency=concurrency), CHECK_WINDOWS)
        again = [
            measure(options, LoadLevel(concurrency=concurrency), CHECK_WINDOWS)
            for _ in range(REPEATS)
        ]

        def holds() -> bool:
            return statistics.median(m.latency_p95_us for m in again) <= BUDGET_MS * 1000 and (
                statistics.median(m.throughput for m in again) >= 0.95 * reported
            )

        if not holds():
            # As the performance gate does: a set that misses is followed by a whole new set,
            # and the median of all the runs is judged (never the best one).
            again += [
                measure(options, LoadLevel(concurrency=concurrency), CHECK_WINDOWS)
                for _ in range(REPEATS)
            ]
    finally:
        stop_server(server)
    p95_us = statistics.median(m.latency_p95_us for m in again)
    throughput = statistics.median(m.throughput for m in again)
    figures = [(round(m.throughput), round(m.latency_p95_us)) for m in again]
    assert p95_us <= BUDGET_MS * 1000, figures
    assert throughput >= 0.95 * reported, (reported, figures)
