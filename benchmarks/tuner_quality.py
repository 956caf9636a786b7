"""How close the Optuna search gets to the exhaustive grid, from one run.

For `digits` (budget p95 <= 10 ms) and `resnet18` (p95 <= 150 ms), on the same narrowed search
space (fp32; queue delay 0 or 1 ms; no preferred sizes; every max_batch_size, instance and
thread count), it runs the exhaustive grid, then Optuna with N trials, each against a fresh
private server on a scratch copy of the model, and prints both best feasible throughputs,
their ratio and the trials each used. Nothing is written back (dry run).

    python benchmarks/tuner_quality.py [--trials 10] [--models digits,resnet18]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tuner.budget import LatencyBudget
from tuner.run import Hooks, TuneOptions, tune_model
from tuner.space import SpaceOptions

ROOT = Path(__file__).resolve().parents[1]
BUDGETS = {"digits": "10ms", "resnet18": "150ms"}
# max_batch_size up to the value each model ships with, as when the figures were first taken.
MAX_BATCH_SIZE_CAPS = {"digits": 64, "resnet18": 16}
SPACE = SpaceOptions(delays_us=(0, 1000), tune_preferred=False)


def run(model: str, search: str, trials: int, scratch: Path) -> tuple[float, int, float]:
    """(best feasible throughput or 0, trials measured, seconds)."""
    repository = scratch / search / "repository"
    shutil.copytree(ROOT / "model_repository" / model, repository / model)
    options = TuneOptions(
        repository=repository,
        budget=LatencyBudget.parse(95, BUDGETS[model]),
        models=(model,),
        trials=trials,
        search=search,
        precisions=("fp32",),
        dry_run=True,
        report_dir=scratch / search / "reports",
        space=SPACE,
        max_batch_size_cap=MAX_BATCH_SIZE_CAPS[model],
    )
    started = time.monotonic()
    summary = tune_model(options, model, None, Hooks(note=lambda m: print(f"  {m}")))
    seconds = time.monotonic() - started
    best = summary.best.outcome.throughput if summary.best and summary.best.outcome else 0.0
    # a fresh study: every trial with an outcome of its own was measured by this call
    measured = sum(t.outcome is not None and t.reused_from is None for t in summary.trials)
    return best, measured, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10, help="Optuna trials")
    parser.add_argument("--models", default="digits,resnet18")
    args = parser.parse_args()
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build_model_repository.py")], check=True
    )
    rows = []
    for model in args.models.split(","):
        with tempfile.TemporaryDirectory() as scratch:
            print(f"{model}: grid")
            grid = run(model, "grid", args.trials, Path(scratch))
            print(f"{model}: optuna, {args.trials} trials")
            optuna = run(model, "optuna", args.trials, Path(scratch))
        rows.append((model, grid, optuna))
    print()
    print(
        f"{'model':<10} {'budget':>7} {'grid best':>10} {'trials':>6} {'optuna best':>12} "
        f"{'trials':>6} {'ratio':>6}"
    )
    for model, (g_best, g_trials, g_s), (o_best, o_trials, o_s) in rows:
        ratio = o_best / g_best if g_best else float("nan")
        print(
            f"{model:<10} {BUDGETS[model]:>7} {g_best:>10.1f} {g_trials:>6} {o_best:>12.1f} "
            f"{o_trials:>6} {ratio:>6.2f}   (grid {g_s:.0f} s, optuna {o_s:.0f} s)"
        )


if __name__ == "__main__":
    main()
