"""Whether the tuner's reported figures hold: tune `digits` (as
tests/e2e/tuner/test_tune_remeasure.py does: 2 trials, 300 ms windows, the top 2 re-measured
3 times interleaved), then serve the written repository in a fresh server and measure it at
the reported concurrency `--repeats` times (after one warm-up measurement) with the
re-measure's windows. Prints, per run, the reported throughput, the re-served median [range]
and their ratio, and the p95 against the budget; then the median and range of the ratios
over `--runs` runs.

    python benchmarks/written_config_holds.py            # ~4 minutes
    python benchmarks/written_config_holds.py --runs 10
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from peer import ROOT, median_range, ours, run_main

from analyzer.api import LoadLevel, LoadOptions, MeasureSettings, measure

BUDGET_MS = 100
TRIAL_INTERVAL_MS = 300
CHECK_WINDOWS = MeasureSettings(
    measurement_interval_ms=2 * TRIAL_INTERVAL_MS,
    stability_percentage=10.0,
    max_trials=8,
    warmup_request_count=20,
)


def _tune(work: Path, repository: Path) -> dict:
    command = [sys.executable, "-c", "from tuner.cli import main; main()"]
    args = ["--latency-p95", f"{BUDGET_MS}ms", "-m", "digits", "--model-repository"]
    args += [str(repository), "--trials", "2", "--precision", "fp32"]
    args += ["--max-batch-size-cap", "32", "--measurement-interval", str(TRIAL_INTERVAL_MS)]
    args += ["--seed", "1", "--remeasure-top", "2", "--remeasure-repeats", "3"]
    result = subprocess.run(command + args, cwd=work, capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        sys.exit(f"the tuning run failed ({result.returncode}):\n{result.stderr[-2000:]}")
    summary: dict = json.loads((work / "reports" / "digits" / "summary.json").read_text())
    return summary


def one_run(index: int, repeats: int) -> float:
    with tempfile.TemporaryDirectory(prefix="holds-") as scratch_dir:
        work = Path(scratch_dir)
        repository = work / "repository"
        shutil.copytree(ROOT / "model_repository" / "digits", repository / "digits")
        best = _tune(work, repository)["best"]
        reported = best["outcome"]["throughput"]
        concurrency = int(best["outcome"]["metrics"]["concurrency"])
        with ours(repository, work / "server.log") as server:
            options = LoadOptions(url=server.urls["http"], model="digits")
            level = LoadLevel(concurrency=concurrency)
            measure(options, level, CHECK_WINDOWS)  # a fresh server's first windows run cold
            again = [measure(options, level, CHECK_WINDOWS) for _ in range(repeats)]
    throughputs = [m.throughput for m in again]
    p95s = [m.latency_p95_us / 1000 for m in again]
    ratio = statistics.median(throughputs) / reported
    print(
        f"run {index + 1}: c{concurrency} reported {reported:,.0f} infer/s; served again "
        f"{median_range(throughputs, ',.0f')}: {ratio:.2f}; p95 {median_range(p95s, '.1f')} ms "
        f"(budget {BUDGET_MS})",
        flush=True,
    )
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3, help="measurements per run")
    args = parser.parse_args()
    ratios = [one_run(i, args.repeats) for i in range(args.runs)]
    print(f"served again / reported: {median_range(ratios, '.2f')} over {args.runs} runs")


if __name__ == "__main__":
    run_main(main)
