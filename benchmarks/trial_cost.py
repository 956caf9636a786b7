"""What a tuning trial costs: one full-window pass over the load levels vs a short first pass,
full windows only at the operating point, the search started where the best trial so far
saturated, and the study's pruner.

For one model (default `digits`, budget p95 <= 10 ms, fp32, the full search space otherwise)
it starts one private tuning server and runs small Optuna studies against it, the two methods
interleaved (A, B, A, B, ...) with the same seed per repeat. Between trials only the model is
reloaded (repository API with a config override). It prints, per method, the seconds per
trial (median [range] and mean over every trial of every repeat), the share of that time spent
outside the load levels (loading the candidate, connecting), the trials pruned, and the best
throughput each study found (median [range] over repeats); then each level of one trial of
each method with its windows (~: first pass) and seconds.

    python benchmarks/trial_cost.py [--trials 8] [--repeats 3] [--model digits] [--budget 10ms]

Raw results: benchmarks/results/trial_cost-<model>.json (results_record's header, the settings
and per method every trial's seconds and seconds outside the levels, in order, the trials
pruned, each repeat's trial count and best throughput, the example trial). `--smoke` (2 trials,
one repeat) writes into a new temporary folder, `--output` into the one it names.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from results_record import header, parse_with_smoke, write_record

from serve.api import open_model_directory
from tuner.budget import LatencyBudget
from tuner.candidate import Candidate
from tuner.evaluate import EvaluationSettings, describe_steps
from tuner.group_evaluate import GroupEvaluator
from tuner.group_members import Member
from tuner.model_run import model_evaluator
from tuner.precision import PrecisionVariant
from tuner.search import SearchSettings, TrialContext, TrialOutcome, run_search
from tuner.server_control import tuning_server
from tuner.space import Platform, SpaceOptions, build_space

ROOT = Path(__file__).resolve().parents[1]
METHODS = {"one pass": False, "first pass + pruning": True}  # name -> first_pass


@dataclass
class Tally:
    """One method's trials over every repeat."""

    seconds: list[float] = field(default_factory=list)
    outside_levels: list[float] = field(default_factory=list)  # load, connect, ...
    pruned: int = 0
    trials: list[int] = field(default_factory=list)  # per repeat
    best: list[float] = field(default_factory=list)  # per repeat
    example: str = ""


class TimedEvaluator:
    """The trial evaluator, each call timed and its load search's levels kept."""

    def __init__(self, evaluator: GroupEvaluator, tally: Tally, verbose: bool) -> None:
        self.evaluator = evaluator
        self.tally = tally
        self.verbose = verbose

    def __call__(self, candidate: Candidate, context: TrialContext) -> TrialOutcome:
        began = time.perf_counter()
        outcome = self.evaluator(candidate, context)
        seconds = time.perf_counter() - began
        levels = sum(step.seconds for step in self.evaluator.last_steps)
        self.tally.seconds.append(seconds)
        self.tally.outside_levels.append(seconds - levels)
        self.tally.pruned += outcome.status == "pruned"
        line = (
            f"trial {context.number} {outcome.status} {outcome.throughput:.0f} infer/s, "
            f"{seconds:.2f} s, {candidate.key or 'as written'}: "
            f"{describe_steps(self.evaluator.last_steps)}"
        )
        if self.verbose:
            print(f"    {line}")
        if context.number == 3 and not self.tally.example:
            self.tally.example = line
        return outcome


def spread(values: list[float], unit: str = "") -> str:
    if not values:
        return "-"
    return (
        f"{statistics.median(values):.2f}{unit} [{min(values):.2f}-{max(values):.2f}]"
        if max(values) < 100
        else f"{statistics.median(values):.0f}{unit} [{min(values):.0f}-{max(values):.0f}]"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=8, help="trials per study")
    parser.add_argument("--repeats", type=int, default=3, help="studies per method")
    parser.add_argument("--model", default="digits")
    parser.add_argument("--budget", default="10ms", help="p95 latency budget")
    parser.add_argument("--verbose", action="store_true", help="print every trial's levels")
    args = parse_with_smoke(parser, {"trials": 2, "repeats": 1})
    budget = LatencyBudget.parse(95, args.budget)
    tallies = {name: Tally() for name in METHODS}
    with tempfile.TemporaryDirectory() as scratch:
        model_dir = Path(scratch) / "repository" / args.model
        shutil.copytree(ROOT / "model_repository" / args.model, model_dir)
        opened = open_model_directory(model_dir)
        config = opened.config
        space = build_space(
            config,
            Platform.detect(),
            SpaceOptions(precisions=("fp32",), latency_limit=budget.limit),
        )
        fp32 = PrecisionVariant("fp32", opened.model_file(), None, 0.0)
        member = Member(opened, (fp32,), opened.model_file())
        print(f"{args.model}: {space.size} candidates, budget {budget.describe()}")
        with tuning_server(model_dir, Path(scratch)) as server:
            for repeat in range(args.repeats):
                for name, first_pass in METHODS.items():
                    tally = tallies[name]
                    settings = EvaluationSettings(first_pass=first_pass).for_model(config)
                    evaluator = model_evaluator(member, server, budget, settings)
                    result = run_search(
                        space,
                        TimedEvaluator(evaluator, tally, args.verbose),
                        SearchSettings(
                            budget,
                            study_name=f"{name}-{repeat}",
                            n_trials=args.trials,
                            seed=repeat,
                        ),
                    )
                    best = result.best.outcome if result.best is not None else None
                    tally.trials.append(len(result.trials))
                    tally.best.append(best.throughput if best is not None else 0.0)
                    print(
                        f"  repeat {repeat + 1} {name}: {len(result.trials)} trials, "
                        f"{sum(tally.seconds[-len(result.trials) :]):.1f} s, "
                        f"best {tally.best[-1]:.0f} infer/s"
                    )
    print()
    print(
        f"{'method':<22} {'s / trial (median [range])':>28} {'mean':>6} {'outside levels':>15} "
        f"{'pruned':>7} {'best infer/s (median [range])':>30}"
    )
    for name, tally in tallies.items():
        mean = statistics.fmean(tally.seconds)
        print(
            f"{name:<22} {spread(tally.seconds, ' s'):>28} {mean:>5.2f}s "
            f"{spread(tally.outside_levels, ' s'):>15} {tally.pruned:>3}/{len(tally.seconds):<3} "
            f"{spread(tally.best):>30}"
        )
    old, new = (statistics.fmean(t.seconds) for t in tallies.values())
    print(f"mean seconds per trial, new / old: {new / old:.2f}")
    for name, tally in tallies.items():
        print(f"{name}, {tally.example}")
    record = {
        **header("trial_cost"),
        "settings": {
            "model": args.model,
            "budget": budget.describe(),
            "trials": args.trials,
            "repeats": args.repeats,
            "space_size": space.size,
            "methods": METHODS,  # name -> first pass
        },
        "methods": {name: asdict(tally) for name, tally in tallies.items()},
    }
    write_record(f"trial_cost-{args.model}", record, args.output)


if __name__ == "__main__":
    main()
