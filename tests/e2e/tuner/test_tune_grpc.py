"""`autotune --latency-p95 ... -i grpc`: the trials' measurements speak gRPC to the tuning
server (its gRPC endpoint read from its log) and find feasible configs as over HTTP."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path

from tests.e2e.conftest import autotune

# Longer windows than the HTTP tests' 300 ms: a busy two-core machine still settles in them.
FAST = ("--measurement-interval", "1000", "--seed", "1")


def test_tuning_over_grpc_measures_the_config_as_written(
    tmp_path: Path, repository_with: Callable[..., Path]
) -> None:
    repository = repository_with("digits")  # as bundled: well within 20 ms
    result = autotune(
        tmp_path,
        *("--latency-p95", "20ms", "--model-repository", str(repository)),
        *("--trials", "1", "--precision", "fp32", "--dry-run", "-i", "grpc", *FAST),
        *("--remeasure-top", "0"),  # the trial's measurement is checked, not a re-measure
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = tmp_path / "reports" / "digits"
    summary = json.loads((report / "summary.json").read_text())
    assert summary["best"]["feasible"] is True
    with (report / "trials.csv").open(newline="") as handle:
        trials = list(csv.DictReader(handle))
    assert len(trials) == 1
    # The config as written was measured over gRPC (a failed connection measures nothing).
    assert float(trials[0]["throughput"]) > 0, trials
