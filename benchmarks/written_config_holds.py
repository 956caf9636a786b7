"""Whether the tuner's reported figures hold: tune `digits` (as
tests/e2e/tuner/test_tune_remeasure.py does: 2 trials, 300 ms windows, the top 2 re-measured
3 times interleaved), then serve the written repository in a fresh server and measure it at
the reported concurrency `--repeats` times (after one warm-up measurement) with the
re-measure's windows, by the client the tuner measured with (our analyzer, HTTP). Prints, per
run, the reported throughput, the re-served median [range] and their ratio, and the p95
against the budget; then the median and range of the ratios over `--runs` runs.

`--server autotune` (the default): the bundled digits (ONNX) tuned on a private `autotune
serve`, served again by a fresh `autotune serve`. `--server tritonserver`: digits as a python
model running its model.onnx on onnxruntime (benchmarks/python_models.py, the repository
benchmarks/model_analyzer_side.py uses) tuned on a private tritonserver 2.51 (`--server
tritonserver --tritonserver` the wrapper of scripts/install_triton_peer.sh, installed on first
use), served again by a fresh tritonserver 2.51 on the written repository, its outputs checked
against in-process onnxruntime first.

    python benchmarks/written_config_holds.py                          # ~4 minutes
    python benchmarks/written_config_holds.py --runs 10
    python benchmarks/written_config_holds.py --server tritonserver    # ~4 minutes

Raw results: benchmarks/results/written_config_holds-<server>.json (results_record's header, the
settings, and per run the reported throughput and concurrency, each re-served measurement's
throughput and p95, their ratio and whether the p95 held). `--smoke` (one run, one measurement)
writes into a new temporary folder, `--output` into the one it names.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

from peer import ROOT, Server, check_outputs, install, median_range, ours, run_main, triton
from python_models import ORT_TOLERANCE, reference, write_python_repository
from results_record import header, parse_with_smoke, write_record

from analyzer.api import LoadLevel, LoadOptions, MeasureSettings, measure

BUDGET_MS = 100
TRIAL_INTERVAL_MS = 300
CHECK_WINDOWS = MeasureSettings(
    measurement_interval_ms=2 * TRIAL_INTERVAL_MS,
    stability_percentage=10.0,
    max_trials=8,
    warmup_request_count=20,
)


def _tune(work: Path, repository: Path, tritonserver: Path | None) -> dict:
    command = [sys.executable, "-c", "from tuner.cli import main; main()"]
    args = ["--latency-p95", f"{BUDGET_MS}ms", "-m", "digits", "--model-repository"]
    args += [str(repository), "--trials", "2", "--precision", "fp32"]
    args += ["--max-batch-size-cap", "32", "--measurement-interval", str(TRIAL_INTERVAL_MS)]
    args += ["--seed", "1", "--remeasure-top", "2", "--remeasure-repeats", "3"]
    if tritonserver is not None:
        args += ["--server", "tritonserver", "--tritonserver", str(tritonserver)]
    result = subprocess.run(command + args, cwd=work, capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        sys.exit(f"the tuning run failed ({result.returncode}):\n{result.stderr[-2000:]}")
    summary: dict = json.loads((work / "reports" / "digits" / "summary.json").read_text())
    return summary


@contextmanager
def fresh_server(repository: Path, log: Path, tritonserver: Path | None) -> Iterator[Server]:
    """The written repository served again: by `autotune serve`, or by tritonserver (its
    outputs checked first)."""
    if tritonserver is None:
        with ours(repository, log) as server:
            yield server
        return
    with triton(tritonserver, repository, log) as server:
        inputs, expected = reference("digits")
        check_outputs(server, "http", "digits", inputs, expected, ORT_TOLERANCE)
        yield server


def one_run(index: int, repeats: int, tritonserver: Path | None) -> dict[str, Any]:
    """The reported throughput and concurrency, the served-again measurements, their ratio
    (served again / reported, medians) and whether the median p95 held the budget."""
    with tempfile.TemporaryDirectory(prefix="holds-") as scratch_dir:
        work = Path(scratch_dir)
        repository = work / "repository"
        if tritonserver is None:
            shutil.copytree(ROOT / "model_repository" / "digits", repository / "digits")
        else:
            write_python_repository(["digits"], repository)
        best = _tune(work, repository, tritonserver)["best"]
        reported = best["outcome"]["throughput"]
        concurrency = int(best["outcome"]["metrics"]["concurrency"])
        with fresh_server(repository, work / "server.log", tritonserver) as server:
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
    return {
        "concurrency": concurrency,
        "reported_infer_per_s": reported,
        "served_again_infer_per_s": throughputs,
        "served_again_p95_ms": p95s,
        "ratio": ratio,
        "p95_held": statistics.median(p95s) <= BUDGET_MS,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3, help="measurements per run")
    parser.add_argument(
        "--server",
        choices=("autotune", "tritonserver"),
        default="autotune",
        help="tune and serve again on autotune serve, or on tritonserver 2.51",
    )
    args = parse_with_smoke(parser, {"runs": 1, "repeats": 1})
    tritonserver = install("install_triton_peer.sh") if args.server == "tritonserver" else None
    runs = [one_run(i, args.repeats, tritonserver) for i in range(args.runs)]
    ratios = [run["ratio"] for run in runs]
    held = sum(run["p95_held"] for run in runs)
    print(
        f"served again / reported on {args.server}: {median_range(ratios, '.2f')} "
        f"over {args.runs} runs; median p95 within the {BUDGET_MS} ms budget in {held} of them"
    )
    record = {
        **header("written_config_holds"),
        "settings": {
            "server": args.server,
            "runs": args.runs,
            "repeats": args.repeats,
            "budget_p95_ms": BUDGET_MS,
            "trial_interval_ms": TRIAL_INTERVAL_MS,
            "check_windows": asdict(CHECK_WINDOWS),
        },
        "runs": runs,
    }
    write_record(f"written_config_holds-{args.server}", record, args.output)


if __name__ == "__main__":
    run_main(main)
