"""How close each search method gets to the exhaustive grid's best, on the full search space.

For `digits` (p95 <= 10 ms) and `resnet18` (p95 <= 150 ms) on this machine's full space (every
instance and thread count, fp32/fp16/int8, batching on/off, max_batch_size 2..128, six queue
delays, preferred sizes), in three steps:

1. The exhaustive grid, measured once (a trial per candidate, against a private server on a
   scratch copy of the model, nothing written back) and cached in benchmarks/results/: an
   Optuna study in a SQLite file, so `--grid-minutes` runs it in chunks across sessions;
   once every candidate is measured, tuner_quality-<model>-<space>.json: results_record's
   header (date, machine, revision, command), the model's SHA-256, the budget, the space,
   every candidate's outcome and trial seconds. Each candidate is measured as a search's
   trial is (a short first pass, full windows at the operating point) but never pruned, so
   the wall times estimated from it are upper bounds of a run whose losing trials are
   pruned. About an hour per model on 2 cores: run it on a quiet machine.
2. Each method replayed over `--seeds` seeds against the cached grid (a tabular benchmark: a
   trial looks its candidate up in the grid, so every method sees the same measurements), at
   most `--share` of the grid's trials each, with `--patience`. Wall time is ESTIMATED from the
   grid's trial seconds of the candidates a run measured.
3. `--remeasure-repeats N`: the grid's top 3 and each method's most frequent winner measured
   again on one live server, all interleaved (A, B, C, A, B, C, N rounds, tuner/remeasure.py's
   windows); each winner is judged against the best median of the grid's top (the live
   optimum): on a noisy machine the grid's single best figure is partly luck.

It prints per model and method: best feasible throughput / the grid's best, trials / grid
size, estimated wall time (median and range over seeds, and the mean ratio, which the goal
is about: >= 0.98 in <= 15% of the grid), then the live re-measure's ratios. Raw results of
steps 2 and 3: benchmarks/results/tuner_quality-<model>-<space>.compare.json (with
`--remeasure-repeats`: .compare-remeasure.json): results_record's header, the settings, every
replayed run per method and seed, and the re-measure's candidates (every repeat's median and
range) with each method's winner over the live optimum; `--output` puts them elsewhere.
`--live METHOD` runs one method live instead, one seed, real wall time.

    python benchmarks/tuner_quality.py --models digits --grid-minutes 30   # grid, resumable
    python benchmarks/tuner_quality.py                                      # replay
    python benchmarks/tuner_quality.py --remeasure-repeats 3
    python benchmarks/tuner_quality.py --live optuna --models digits
    python benchmarks/tuner_quality.py --narrow --max-batch-size-cap 8      # a small smoke run

Model Analyzer's rows (its quick and optuna modes on Triton, same models and budgets), as
benchmarks/model_analyzer_side.py recorded them, are printed beside: its best throughput on
Triton, configs measured, wall time, and its winning config looked up in the grid (the same
search question answered on our server's measurements: the servers differ, the picks compare).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import platform
import shutil
import signal
import sqlite3
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import optuna
from google.protobuf import text_format
from grid_drift import (
    describe_drift,
    drift,
    live_model,
    load_reference,
    measure_reference,
    write_reference,
)
from model_analyzer_run import load_results
from peer import median_range
from results_record import add_output_option, header, write_record
from tritonclient.grpc import model_config_pb2 as mc

from common.atomic import write_text_atomic
from common.cpu import usable_cpu_count
from serve.api import open_model_directory
from tuner.budget import LatencyBudget
from tuner.candidate import THREAD_COUNT, Candidate
from tuner.duration import Duration
from tuner.model_run import tune_model
from tuner.remeasure import RemeasureSettings, remeasure, server_measurer
from tuner.run import (
    Hooks,
    TuneOptions,
    fingerprint_of,
    model_space,
    prepare_model_variants,
)
from tuner.samplers import METHODS
from tuner.samplers_replay import Measured, ReplayRun, replay, table_optimum
from tuner.search_study import CANDIDATE, KEY, OUTCOME, sqlite_url, stored_objective
from tuner.search_types import SearchSettings, TrialOutcome, TrialRecord
from tuner.space import Platform, SearchSpace, SpaceOptions

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
BUDGETS = {"digits": "10ms", "resnet18": "150ms"}
NARROW = SpaceOptions(delays_us=(0, 1000), tune_preferred=False)
GRID_TOP = 3  # the grid's best candidates re-measured live with the methods' winners


@dataclass(frozen=True)
class Setup:
    """One model's benchmark: its options, space and cache files."""

    model: str
    options: TuneOptions
    space: SearchSpace
    label: str  # "full", else the smaller space of a smoke run ("narrow-mbs4")

    @property
    def stem(self) -> Path:
        return RESULTS / f"tuner_quality-{self.model}-{self.label}"

    @property
    def grid_study(self) -> str:
        return f"{self.model}-{self.label}-grid"

    def settings(self, n_trials: int | None = None, patience: int | None = None) -> SearchSettings:
        return SearchSettings(
            budget=self.options.budget,
            study_name=self.model,
            n_trials=n_trials,
            patience=patience,
        )


def setup(model: str, args: argparse.Namespace, repository: Path, scratch: Path) -> Setup:
    narrow = args.narrow
    options = TuneOptions(
        repository=repository,
        budget=LatencyBudget.parse(95, BUDGETS[model]),
        models=(model,),
        precisions=("fp32",) if narrow else ("fp32", "fp16", "int8"),
        dry_run=True,
        report_dir=scratch / "reports",
        max_batch_size_cap=args.max_batch_size_cap,
        space=NARROW if narrow else SpaceOptions(),
        seed=0,
    )
    opened = open_model_directory(repository / model)
    path = opened.model_file()
    variants = prepare_model_variants(options, repository / model, opened.config, path, Hooks())
    usable = tuple(v.precision for v in variants if v.usable) or ("fp32",)
    space = model_space(options, opened.config, path, Platform.detect(), usable)
    cap = args.max_batch_size_cap
    label = "full" if not narrow and cap == 128 else f"{'narrow' if narrow else 'all'}-mbs{cap}"
    return Setup(model, options, space, label)


def run_grid(bench: Setup, minutes: float, chunk_minutes: float) -> None:
    """Measure grid points for up to `minutes` (the study resumes where it stopped), in chunks
    of `chunk_minutes`, the reference candidate measured before the first and after each
    (benchmarks/grid_drift.py)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    check_grid_machine(bench)
    check_grid_model(bench)
    print(f"{bench.model}: grid of {bench.space.size} candidates, {minutes:g} min this time")
    deadline = time.monotonic() + minutes * 60
    measure_reference(bench)
    while not complete(bench, grid_table(bench).table):
        left = deadline - time.monotonic()
        if left < 60:
            break
        _grid_chunk(bench, min(left, chunk_minutes * 60))
        measure_reference(bench)
    print(f"{bench.model}: {describe_drift(load_reference(bench))}")


def check_grid_machine(bench: Setup) -> None:
    """A grid resumed across runs (its study in <stem>.db) must go on where it started: one
    grid's figures are comparable only from one kind of machine. The first run records it in
    <stem>.machine.json."""
    here = {"cpu": _cpu_model(), "cores": usable_cpu_count()}
    record = bench.stem.with_suffix(".machine.json")
    if not record.is_file() or not bench.stem.with_suffix(".db").is_file():
        write_text_atomic(record, json.dumps(here, indent=1) + "\n")
        return
    started = json.loads(record.read_text())
    if started != here:
        raise SystemExit(
            f"{bench.stem.with_suffix('.db')}: this grid started on {started}, this machine is "
            f"{here}; move the .db and .machine.json away to start the grid again here"
        )


def check_grid_model(bench: Setup) -> None:
    """A resumed grid must measure the model file it started on. The tuner refuses such a
    resume too, but only once the reference candidate was measured into the grid's record."""
    database = bench.stem.with_suffix(".db")
    if not database.is_file():
        return
    stored = stored_objective(sqlite_url(database), bench.grid_study) or {}
    opened = open_model_directory(bench.options.repository / bench.model)
    here = fingerprint_of(bench.options, opened.config, opened.model_file())["model_sha256"]
    began = stored.get("model_sha256", here)
    if began != here:
        raise SystemExit(
            f"{database}: this grid measured {bench.model}'s model file {began}, this "
            f"repository's is {here}; move the .db, .machine.json and .reference.json away "
            "to start the grid again on this model"
        )


def _grid_chunk(bench: Setup, seconds: float) -> None:
    options = _replace_options(
        bench.options,
        search="grid",
        storage=sqlite_url(bench.stem.with_suffix(".db")),
        study_name=bench.grid_study,
        time_budget=Duration.from_s(seconds),
        remeasure=RemeasureSettings(top=0),
        # every candidate to its operating point, measured as a search's trial is (first pass,
        # full windows at the operating point) but never pruned: a figure cut short against
        # the grid's incumbent would be one no other method's search order would have got
        evaluation=replace(bench.options.evaluation, prune=False),
    )
    tune_model(options, bench.model, options.time_budget, Hooks())


def forget_grid_trials(bench: Setup, start: datetime, end: datetime) -> None:
    """Grid trials whose run overlapped [start, end] lose their outcome (state FAIL, user
    attribute "forgotten" naming the window), so that the grid measures those candidates again.
    Optuna has no call for changing a finished trial: this edits the SQLite study directly,
    with no grid running on it."""
    database = bench.stem.with_suffix(".db")
    if not database.is_file():
        raise SystemExit(f"{database}: no grid study to forget trials of")
    naive = [t.astimezone(UTC).replace(tzinfo=None).isoformat(sep=" ") for t in (start, end)]
    note = json.dumps(f"ran during {start.isoformat()}/{end.isoformat()}")
    with contextlib.closing(sqlite3.connect(database)) as db, db:
        ids = [
            row[0]
            for row in db.execute(
                "SELECT trials.trial_id FROM trials JOIN studies USING (study_id) "
                "WHERE studies.study_name = ? AND trials.datetime_start <= ? "
                "AND COALESCE(trials.datetime_complete, ?) >= ?",
                (bench.grid_study, naive[1], naive[1], naive[0]),
            )
        ]
        marks = ",".join("?" * len(ids))
        if ids:
            db.execute(f"UPDATE trials SET state = 'FAIL' WHERE trial_id IN ({marks})", ids)
            db.execute(f"DELETE FROM trial_values WHERE trial_id IN ({marks})", ids)
            db.execute(
                f"DELETE FROM trial_user_attributes WHERE key = ? AND trial_id IN ({marks})",
                [OUTCOME, *ids],
            )
            db.executemany(
                "INSERT OR REPLACE INTO trial_user_attributes (trial_id, key, value_json) "
                "VALUES (?, 'forgotten', ?)",
                [(trial_id, note) for trial_id in ids],
            )
    references = load_reference(bench)
    kept = [r for r in references if not start <= datetime.fromisoformat(str(r["time"])) <= end]
    if len(kept) < len(references):  # the drift is the quiet machine's, not the busy one's
        write_reference(bench, kept)
    print(
        f"{bench.model}: {len(ids)} grid trials and {len(references) - len(kept)} reference "
        f"measurements of {start:%H:%M:%S}-{end:%H:%M:%S} forgotten"
    )


def _window(text: str) -> tuple[datetime, datetime]:
    try:
        start, end = (datetime.fromisoformat(part) for part in text.split("/"))
    except ValueError:
        raise SystemExit(f"--grid-forget {text!r}: give START/END as ISO times") from None
    start, end = (t if t.tzinfo else t.replace(tzinfo=UTC) for t in (start, end))
    return start, end


@dataclass(frozen=True)
class Grid:
    """The grid's outcomes by candidate key (the as-written trial under its key, "" when it is
    no point of the space), and when each candidate's trial started (POSIX seconds)."""

    table: dict[str, Measured]
    started: dict[str, float]


def grid_table(bench: Setup) -> Grid:
    """The grid as its study holds it so far."""
    storage = sqlite_url(bench.stem.with_suffix(".db"))
    grid = Grid({}, {})
    if not bench.stem.with_suffix(".db").is_file():
        return grid
    try:
        study = optuna.load_study(study_name=bench.grid_study, storage=storage)
    except KeyError:  # no study of that name yet
        return grid
    for trial in study.get_trials(deepcopy=False):
        if OUTCOME not in trial.user_attrs or CANDIDATE not in trial.user_attrs:
            continue
        outcome = TrialOutcome.from_json(trial.user_attrs[OUTCOME])
        seconds = trial.duration.total_seconds() if trial.duration else 0.0
        key = str(trial.user_attrs[KEY])
        if key not in grid.table:
            grid.table[key] = Measured(outcome, seconds)
            if trial.datetime_start is not None:
                grid.started[key] = trial.datetime_start.astimezone(UTC).timestamp()
    return grid


def write_grid_json(bench: Setup, grid: Grid) -> Path:
    table = grid.table
    opened = open_model_directory(bench.options.repository / bench.model)
    fingerprint = fingerprint_of(bench.options, opened.config, opened.model_file())
    key, best = table_optimum(table, bench.settings())
    document = {
        **header("tuner_quality"),
        "model": bench.model,
        "model_sha256": fingerprint["model_sha256"],
        "budget": bench.options.budget.describe(),
        "space": bench.space.describe(),
        "best": {"key": key, "throughput": best},
        "grid_seconds": sum(m.seconds for m in table.values()),
        "drift": drift(load_reference(bench)),  # the series: <stem>.reference.json
        "candidates": [
            {
                "key": k,
                "outcome": m.outcome.to_json(),
                "seconds": m.seconds,
                "started": grid.started.get(k),
            }
            for k, m in table.items()
        ],
    }
    path = bench.stem.with_suffix(".json")
    write_text_atomic(path, json.dumps(document, indent=1) + "\n")
    return path


def load_grid_json(bench: Setup) -> Grid | None:
    path = bench.stem.with_suffix(".json")
    if not path.is_file():
        return None
    document = json.loads(path.read_text())
    table = {
        c["key"]: Measured(TrialOutcome.from_json(c["outcome"]), float(c["seconds"]))
        for c in document["candidates"]
    }
    started = {c["key"]: float(c["started"]) for c in document["candidates"] if c.get("started")}
    missing = [c.key for c in bench.space.grid_points() if c.key not in table]
    extra = len([k for k in table if k]) - bench.space.size  # "" is the as-written trial
    if missing or extra:
        raise SystemExit(
            f"{path}: made for another space ({len(missing)} of this space's candidates are "
            f"not in it, {max(extra, 0)} of its own are not in this space): move it away and "
            "run the grid again"
        )
    if document["space"] != bench.space.describe():  # the same candidates, described anew
        described = document["space"]
        print(f"{path.name}: the same {bench.space.size} candidates, described as {described}")
    return Grid(table, started)


def complete(bench: Setup, table: dict[str, Measured]) -> bool:
    return all(c.key in table for c in bench.space.grid_points())


@dataclass(frozen=True)
class MethodRow:
    method: str
    runs: list[ReplayRun]
    optimum: float
    grid_size: int

    def ratios(self) -> list[float]:
        return [r.best_throughput / self.optimum for r in self.runs]

    def winner(self) -> str | None:
        keys = Counter(r.best_key for r in self.runs if r.best_key)
        return keys.most_common(1)[0][0] if keys else None


def replay_methods(
    bench: Setup, table: dict[str, Measured], args: argparse.Namespace
) -> list[MethodRow]:
    _, optimum = table_optimum(table, bench.settings())
    n_trials = max(1, math.floor(args.share * bench.space.size))
    rows = []
    for method in args.methods.split(","):
        runs = [
            replay(bench.space, table, bench.settings(n_trials, args.patience), method, seed)
            for seed in range(args.seeds)
        ]
        rows.append(MethodRow(method, runs, optimum, bench.space.size))
    return rows


def print_rows(model: str, grid_seconds: float, rows: Sequence[MethodRow]) -> None:
    print(
        f"\n{model}: median [range] over {len(rows[0].runs)} seeds; wall time estimated "
        f"from the grid's trial seconds (the grid took {grid_seconds / 60:.0f} min)"
    )
    print(f"{'method':<9} {'best/grid':>22} {'mean':>6} {'trials/grid':>22} {'est. wall':>18}")
    for row in rows:
        trials = [r.trials / row.grid_size for r in row.runs]
        wall = [r.seconds / 60 for r in row.runs]
        print(
            f"{row.method:<9} {median_range(row.ratios(), '.3f'):>22} "
            f"{statistics.mean(row.ratios()):>6.3f} {median_range(trials, '.1%'):>22} "
            f"{median_range(wall, '.1f'):>14} min"
        )


def replay_record(bench: Setup, grid_key: str, optimum: float, rows: Sequence[MethodRow]) -> dict:
    """The replay's raw results: which grid file it read, the settings and every run per
    method (its best, that best over the grid's, the trials it measured, the seconds those
    trials took in the grid)."""
    return {
        "grid_file": bench.stem.with_suffix(".json").name,
        "grid_best": {"key": grid_key, "throughput": optimum},
        "grid_size": bench.space.size,
        "methods": [
            {
                "method": row.method,
                "winner": row.winner(),
                "runs": [
                    {**asdict(run), "of_grid_best": run.best_throughput / optimum}
                    for run in row.runs
                ],
            }
            for row in rows
        ],
    }


def remeasure_winners(
    bench: Setup, table: dict[str, Measured], rows: Sequence[MethodRow], repeats: int
) -> dict:
    """The grid's top candidates and each method's most frequent winner measured again, all
    in the same interleaved rounds on one live server: the live optimum is the best median
    among the grid's top (one grid measurement of near-equal candidates picks a lucky one),
    and each method's winner is judged against it. Returns the raw results: every candidate's
    repeats, the live optimum and each method's winner over it."""
    settings = bench.settings()
    ranked = sorted(
        (m.outcome.throughput, key) for key, m in table.items() if settings.feasible(m.outcome)
    )
    top = [key for _, key in reversed(ranked[-GRID_TOP:])]
    winners = {row.method: row.winner() for row in rows}
    keys = list(dict.fromkeys([*top, *(key for key in winners.values() if key)]))
    points = {c.key: (number, c) for number, c in enumerate(bench.space.grid_points())}
    records = [
        TrialRecord(points[k][0], "COMPLETE", points[k][1], table[k].outcome, True, 0.0)
        for k in keys
    ]
    remeasure_settings = RemeasureSettings(top=len(records), repeats=repeats)
    with live_model(bench) as live:
        result = remeasure(
            records,
            live.evaluator.load,
            server_measurer(live.server, live.evaluation, remeasure_settings),
            bench.options.budget,
            remeasure_settings,
            search_best=None,
        ).result
    key_of = {record.number: k for record, k in zip(records, keys, strict=True)}
    medians: dict[str, float] = {}
    record: dict = {
        "repeats": repeats,
        "rounds": result.rounds,
        "windows": result.windows,
        "grid_top": top,
        "candidates": [],
        "live_optimum": None,
        "winners": {},
    }
    print(
        f"\n{bench.model}: re-measured live, {result.rounds} interleaved rounds "
        f"({result.windows}): the grid's top {len(top)} and each method's winner"
    )
    for candidate in result.candidates:
        key = key_of[candidate.trial]
        spread = candidate.throughput
        if candidate.held and spread is not None:
            medians[key] = spread.median
        record["candidates"].append(
            {
                "key": key,
                "grid_throughput": table[key].outcome.throughput,
                "held": candidate.held,
                "message": candidate.message,
                "throughput": asdict(spread) if spread else None,
            }
        )
        shown = f"{spread.median:,.0f} [{spread.low:,.0f}-{spread.high:,.0f}]" if spread else "-"
        grid_rank = f"grid #{top.index(key) + 1}" if key in top else "        "
        print(
            f"  {grid_rank} {shown:>24} infer/s (grid {table[key].outcome.throughput:,.0f})"
            f"  {key}{'' if candidate.held else '  ' + candidate.message}"
        )
    live_best = max((medians[k] for k in top if k in medians), default=0.0)
    if live_best <= 0:
        print("  no candidate of the grid's top held the budget live: nothing to compare")
        return record
    record["live_optimum"] = live_best
    print(f"  live optimum {live_best:,.0f} infer/s")
    for method, winner in winners.items():
        share = medians[winner] / live_best if winner in medians else None
        record["winners"][method] = {"key": winner, "of_live_optimum": share}
        if winner is None:
            print(f"  {method:<9} no winner")
        elif share is not None:
            print(f"  {method:<9} {share:.3f} of the live optimum ({winner})")
        else:
            print(f"  {method:<9} its winner did not hold the budget live ({winner})")
    return record


def run_live(bench: Setup, table: dict[str, Measured] | None, args: argparse.Namespace) -> None:
    options = _replace_options(
        bench.options,
        search=args.live,
        trials=max(1, math.floor(args.share * bench.space.size)),
        patience=args.patience,
        storage=None,
        seed=args.live_seed,
    )
    started = time.monotonic()
    summary = tune_model(options, bench.model, None, Hooks(note=print))
    seconds = time.monotonic() - started
    best = summary.best.outcome.throughput if summary.best and summary.best.outcome else 0.0
    measured = sum(t.outcome is not None and t.reused_from is None for t in summary.trials)
    grid = table_optimum(table, bench.settings())[1] if table else float("nan")
    print(
        f"\n{bench.model} {args.live} (live, seed {args.live_seed}): best {best:,.1f}/s = "
        f"{best / grid:.3f} of the grid's, {measured} trials "
        f"({measured / bench.space.size:.1%} of the grid), {seconds / 60:.1f} min"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="digits,resnet18")
    parser.add_argument("--grid-minutes", type=float, help="measure grid points this long")
    parser.add_argument(
        "--grid-chunk-minutes",
        type=float,
        default=4.0,
        help="the reference candidate is measured again after each chunk this long",
    )
    parser.add_argument(
        "--grid-forget",
        action="append",
        default=[],
        metavar="START/END",
        help="UTC times (2026-12-03T06:11:30/2026-12-03T06:19:45): the grid trials that ran "
        "during them are measured again (the machine was busy with other work); repeatable",
    )
    parser.add_argument("--methods", default=",".join(m for m in METHODS if m != "grid"))
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--share", type=float, default=0.15, help="trials / grid size at most")
    parser.add_argument("--patience", type=int, default=30)
    parser.add_argument("--remeasure-repeats", type=int, default=0)
    parser.add_argument("--live", choices=[m for m in METHODS if m != "grid"])
    parser.add_argument("--live-seed", type=int, default=0)
    parser.add_argument("--narrow", action="store_true", help="fp32, delay 0/1 ms, no preferred")
    parser.add_argument("--max-batch-size-cap", type=int, default=128)
    add_output_option(parser)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for model in args.models.split(","):
        with tempfile.TemporaryDirectory(prefix="tuner-quality-") as scratch:
            repository = Path(scratch) / "repository"
            shutil.copytree(ROOT / "model_repository" / model, repository / model)
            bench = setup(model, args, repository, Path(scratch))
            grid = load_grid_json(bench)
            for window in args.grid_forget:
                forget_grid_trials(bench, *_window(window))
            if grid is None and args.grid_minutes:
                run_grid(bench, args.grid_minutes, args.grid_chunk_minutes)
                measured = grid_table(bench)
                if complete(bench, measured.table):
                    print(f"{model}: grid complete: {write_grid_json(bench, measured)}")
                    grid = measured
                else:
                    done = sum(c.key in measured.table for c in bench.space.grid_points())
                    print(f"{model}: grid {done}/{bench.space.size}; run again to go on")
            if args.live:
                run_live(bench, grid.table if grid else None, args)
                continue
            if grid is None:
                print(f"{model}: no complete grid in {RESULTS} yet (--grid-minutes to run it)")
                continue
            compare(bench, grid, args)


def compare(bench: Setup, grid: Grid, args: argparse.Namespace) -> None:
    """Replay every method against the grid, then (`--remeasure-repeats`) re-measure the
    winners live."""
    key, best = table_optimum(grid.table, bench.settings())
    if best <= 0:
        print(f"{bench.model}: no candidate of the grid met the budget: nothing to compare")
        return
    rows = replay_methods(bench, grid.table, args)
    title = f"{bench.model} (the grid's best {best:,.0f}/s: {key})"
    print_rows(title, measuring_seconds(grid), rows)
    print(f"{bench.model}: the grid's {describe_drift(load_reference(bench))}")
    print_model_analyzer(bench, grid.table)
    record = {
        **header("tuner_quality"),
        "model": bench.model,
        "settings": {
            "seeds": args.seeds,
            "share": args.share,
            "patience": args.patience,
            "remeasure_repeats": args.remeasure_repeats,
        },
        "replay": replay_record(bench, key, best, rows),
    }
    if args.remeasure_repeats:
        record["remeasure"] = remeasure_winners(bench, grid.table, rows, args.remeasure_repeats)
    # Named after the grid it replays; a run with a re-measure keeps its own file.
    suffix = "-remeasure" if args.remeasure_repeats else ""
    write_record(f"{bench.stem.name}.compare{suffix}", record, args.output)


def print_model_analyzer(bench: Setup, table: dict[str, Measured]) -> None:
    """Model Analyzer's recorded runs on this model (benchmarks/model_analyzer_side.py): what
    it found on Triton, at what cost, and its pick looked up in this grid, which answers the
    search question on our server's measurements (the servers differ; the picks compare)."""
    results = load_results(bench.model)
    if not results:
        print(f"{bench.model}: no Model Analyzer run recorded (benchmarks/model_analyzer_side.py)")
        return
    print(f"\n{bench.model}: Model Analyzer on Triton, same budget (its figures are Triton's)")
    print(f"{'mode':<7} {'best infer/s':>12} {'p95 ms':>7} {'configs':>7} {'wall':>9}  its pick")
    for result in results:
        best = result["best"]
        if best is None:
            shown, pick = f"{'none':>12} {'-':>7}", "no measurement met the budget"
        else:
            shown = f"{best['throughput']:>12,.1f} {best['p95_ms']:>7.1f}"
            pick = describe_pick(bench, model_analyzer_pick(bench, best["config_pbtxt"]), table)
        smoke = "  (smoke run)" if result["smoke"] else ""
        print(
            f"{result['mode']:<7} {shown} {result['configs_measured']:>7} "
            f"{result['wall_s'] / 60:>5.1f} min  {pick}{smoke}  [{result['date']}]"
        )


def model_analyzer_pick(bench: Setup, config_text: str) -> Candidate | None:
    """Model Analyzer's winning config as a point of this space: its batching, instance count
    and thread count on the model's own config (it serves the same model file in FP32, as a
    python model); None when no point of the space is that config."""
    theirs = text_format.Parse(config_text, mc.ModelConfig(), allow_unknown_field=True)
    ours = mc.ModelConfig()
    ours.CopyFrom(bench.space.base)
    ours.max_batch_size = theirs.max_batch_size
    ours.ClearField("dynamic_batching")
    if theirs.HasField("dynamic_batching"):
        ours.dynamic_batching.CopyFrom(theirs.dynamic_batching)
    if theirs.instance_group and ours.instance_group:
        ours.instance_group[0].count = theirs.instance_group[0].count
    if THREAD_COUNT in theirs.parameters:
        ours.parameters[THREAD_COUNT].CopyFrom(theirs.parameters[THREAD_COUNT])
    return bench.space.point_of(ours)


def describe_pick(bench: Setup, pick: Candidate | None, table: dict[str, Measured]) -> str:
    if pick is None:
        return "not a point of our space"
    measured = table.get(pick.key)
    if measured is None:
        return f"{pick.key}: not in the grid"
    settings = bench.settings()
    outcome = measured.outcome
    if not settings.feasible(outcome):
        p95_ms = (outcome.latency_us or math.nan) / 1000
        return f"{pick.key}: in our grid {outcome.status}, p95 {p95_ms:.1f} ms"
    _, optimum = table_optimum(table, settings)
    rate = outcome.throughput
    return f"{pick.key}: {rate:,.1f}/s in our grid = {rate / optimum:.3f} of its best"


def measuring_seconds(grid: Grid) -> float:
    return sum(m.seconds for m in grid.table.values())


def _replace_options(options: TuneOptions, **changes: object) -> TuneOptions:
    return replace(options, **changes)  # type: ignore[arg-type]


def _cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


if __name__ == "__main__":
    # A sitting started as a background job has SIGINT ignored; Ctrl-C or `kill -INT` should
    # still stop it between measurements (SIGTERM does too: the study keeps what it measured).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    main()
