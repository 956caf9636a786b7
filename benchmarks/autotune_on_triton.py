"""autotune tuning a model on tritonserver 2.51 (`--server tritonserver`), for
benchmarks/model_analyzer_side.py: the same python-model repository Model Analyzer searches,
the same p95 budget, our analyzer measuring every trial. Not a script.

`run_autotune` copies the model's folder into a scratch repository, runs the tuner on it as a
user would (`python -m tuner --latency-p95 ... --server tritonserver --tritonserver WRAPPER`,
its own defaults otherwise: search, windows, re-measure of its top 3) with write-back, and
returns what it found: the best feasible throughput among its trials (the figure that matches
Model Analyzer's "highest measurement within the budget"), the winner its own re-measure chose
with its median, the trials it measured, its wall time, and the config.pbtxt it left in the
repository (the config as written when that was the best). `write_result` / `load_result` keep
it as benchmarks/results/autotune_on_triton-<model>.json (results_record's header first, the
tuner's own command line as tuner_command).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from peer import ROOT, stop_group
from results_record import header, write_record

from common.tied_child import tied_command

# The tuner's exit codes that still leave a summary: 0 tuned, 3 nothing met the budget.
SUMMARY_CODES = (0, 3)


@dataclass(frozen=True)
class AutotuneSettings:
    """What a run is given besides the model and the budget."""

    protocol: str  # its analyzer's protocol (-i)
    trials: int  # --trials: an upper bound when a time budget is set
    time_budget_s: float | None  # --time-budget; None: none
    time_budget_from: str  # where that figure came from (printed and recorded)
    seed: int
    extra: tuple[str, ...] = ()  # more tuner flags (the smoke run's short windows)


def tuner_command(
    model: str,
    budget_ms: float,
    repository: Path,
    reports: Path,
    wrapper: Path,
    s: AutotuneSettings,
) -> list[str]:
    command = [
        *(sys.executable, "-m", "tuner", "--latency-p95", f"{budget_ms:g}ms", "-m", model),
        *("--model-repository", str(repository), "--report-dir", str(reports)),
        *("--server", "tritonserver", "--tritonserver", str(wrapper)),
        *("-i", s.protocol, "--trials", str(s.trials), "--seed", str(s.seed)),
    ]
    if s.time_budget_s is not None:
        command += ["--time-budget", f"{s.time_budget_s:.0f}s"]
    return [*command, *s.extra]


def run_autotune(
    model: str,
    budget_ms: float,
    source: Path,
    run_dir: Path,
    wrapper: Path,
    settings: AutotuneSettings,
    smoke: bool,
) -> dict[str, Any]:
    """Tune `model` (its folder in the python-model repository `source`) on a private
    tritonserver; the result as `load_result` returns it."""
    repository = run_dir / "repository"
    shutil.copytree(source / model, repository / model)
    as_written = (repository / model / "config.pbtxt").read_text()
    reports = run_dir / "reports"
    command = tuner_command(model, budget_ms, repository, reports, wrapper, settings)
    log = run_dir / "autotune.log"
    # This checkout's tuner, whatever is installed; a wide console for its tables.
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    env["COLUMNS"] = "200"
    started = time.monotonic()
    # A session of its own, as Model Analyzer's: stopping its group also stops the tritonserver
    # it started (which also ends with it: the tuner ties its servers to itself).
    with log.open("wb") as out:
        process = subprocess.Popen(
            tied_command(command),
            cwd=run_dir,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        returncode = process.wait()
    finally:
        stop_group(process)
    seconds = time.monotonic() - started
    summary_path = reports / model / "summary.json"
    if returncode not in SUMMARY_CODES or not summary_path.is_file():
        tail = log.read_text(errors="replace")[-4000:]
        raise SystemExit(f"autotune failed ({returncode}): {' '.join(command)}\n{tail}")
    summary = json.loads(summary_path.read_text())
    written = (repository / model / "config.pbtxt").read_text()
    return summarize(
        model, budget_ms, summary, written, as_written, seconds, command, settings, smoke
    )


def trial_row(trial: dict[str, Any]) -> dict[str, Any]:
    outcome = trial["outcome"]
    metrics = outcome.get("metrics") or {}
    concurrency = metrics.get("concurrency")
    return {
        "number": trial["number"],
        "key": trial["key"],
        "as_written": trial["as_written"],
        "state": trial["state"],
        "status": outcome["status"],
        "feasible": trial["feasible"],
        "throughput": outcome["throughput"],
        "p95_ms": outcome["latency_us"] / 1000 if outcome["latency_us"] else None,
        "concurrency": int(concurrency) if concurrency else None,
        "seconds": trial["duration_s"],
        "reused_from": trial["reused_from"],
    }


def summarize(
    model: str,
    budget_ms: float,
    summary: dict[str, Any],
    written: str,
    as_written: str,
    seconds: float,
    command: list[str],
    settings: AutotuneSettings,
    smoke: bool,
) -> dict[str, Any]:
    trials = [trial_row(t) for t in summary["trials"]]
    measured = [t for t in trials if t["reused_from"] is None and t["state"] != "FAIL"]
    feasible = [t for t in measured if t["feasible"]]
    search_best = max(feasible, key=lambda t: t["throughput"], default=None)
    best = summary["best"]
    winner = None
    if best is not None:
        metrics = best["outcome"]["metrics"]
        candidates = (summary["remeasure"] or {}).get("candidates", [])
        remeasured = next((c for c in candidates if c["trial"] == best["number"]), None)
        winner = {
            "trial": best["number"],
            "key": best["key"],
            "as_written": best["as_written"],
            # summary.json's best holds the re-measure's medians (the search's figures when
            # the re-measure is off)
            "throughput": best["outcome"]["throughput"],
            "p95_ms": best["outcome"]["latency_us"] / 1000,
            "concurrency": int(metrics["concurrency"]),
            "remeasured_throughputs": remeasured["throughputs"] if remeasured else None,
            "remeasured_p95_ms": (
                [us / 1000 for us in remeasured["latencies_us"]] if remeasured else None
            ),
            "config_pbtxt": written,
        }
    return {
        **header("autotune_on_triton"),
        "model": model,
        "tool": "autotune",
        "budget_p95_ms": budget_ms,
        "best_feasible": search_best,
        "winner": winner,
        "written": written != as_written,
        "changes": summary["changes"],
        "configs_measured": len(measured),
        "trials": len(trials),
        "pruned": sum(t["state"] == "PRUNED" for t in measured),
        "stop_reason": summary["stop_reason"],
        "space": summary["space"],
        "wall_s": round(seconds, 1),
        "smoke": smoke,
        "tuner_command": command,
        "settings": {
            "protocol": settings.protocol,
            "trials": settings.trials,
            "time_budget_s": settings.time_budget_s,
            "time_budget_from": settings.time_budget_from,
            "seed": settings.seed,
            "extra": list(settings.extra),
        },
        "server": summary["server"],
        "remeasure": summary["remeasure"],
        "all_trials": trials,
    }


def write_result(result: dict[str, Any], directory: Path) -> Path:
    """`result` as autotune_on_triton-<model>.json in `directory`."""
    return write_record(f"autotune_on_triton-{result['model']}", result, directory)


def load_result(model: str, directory: Path) -> dict[str, Any] | None:
    """The recorded run for `model` (as `summarize` wrote it: the header (results_record.header:
    benchmark, date, machine, revision, command), model, tool, budget_p95_ms, best_feasible
    (None, or a trial: number, key, throughput, p95_ms, concurrency, ...), winner (None, or
    trial, key, throughput and p95_ms (its re-measure's medians), concurrency, config_pbtxt),
    configs_measured, trials, wall_s, tuner_command, settings, all_trials; in older files
    `command` is the tuner's and load_average_1m stands beside machine); None when there is
    none."""
    path = directory / f"autotune_on_triton-{model}.json"
    if not path.is_file():
        return None
    result: dict[str, Any] = json.loads(path.read_text())
    return result
