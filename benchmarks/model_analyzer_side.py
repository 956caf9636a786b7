"""One server, two searches: NVIDIA Triton Model Analyzer 1.58 and autotune, each tuning the same
models on the same tritonserver 2.51, then each winner measured again on one tritonserver by one
client.

Models and budgets as benchmarks/tuner_quality.py's: digits p95 <= 10 ms, resnet18 p95 <= 150 ms.
The server: tritonserver 2.51 (the nvidia-pytriton 0.7.0 wheel, scripts/install_triton_peer.sh),
local launch, CPU only. It has no onnxruntime backend, so each model is a python model running
the bundled model.onnx on onnxruntime (benchmarks/python_models.py: the requests of a batch
joined into one run, `intra_op_thread_count` from the config's parameters), its config otherwise
as bundled; its outputs are checked against in-process onnxruntime before anything is measured.
Both tools search that one repository.

For each model, the `--modes` in the order given (default quick, autotune, optuna: the tools
take turns, so a slow spell of the machine does not fall on one tool alone):
- `quick`, `optuna`, `brute`: `model-analyzer profile` in that mode (benchmarks/
  model_analyzer_run.py says how: triton_launch_mode local, cpu_only, objective
  perf_throughput, the budget as constraint perf_latency_p95, perf_analyzer 2.51 measuring);
  model_analyzer-<model>-<mode>.json. `brute` is not in the default (over an hour a model).
- `autotune`: `autotune --latency-p95 <budget> -m <model> --server tritonserver --tritonserver
  <wrapper>` on a copy of the repository, our analyzer measuring every trial, the tuner's
  defaults otherwise (search climb, 500 ms windows, its top 3 re-measured 3 times), write-back
  on (benchmarks/autotune_on_triton.py); autotune_on_triton-<model>.json. Its time:
  `--time-budget` = AUTOTUNE_TIME_SHARE x Model Analyzer quick's wall time on that model (this
  run's, else the one recorded in --output), the margin for its start-up and last trial (a
  run ends at most about one trial after its budget); `--trials` only bounds it from above.
  Without a quick wall time, `--autotune-trials` alone.
- Each tool's search speaks its own client's protocol: Model Analyzer's client_protocol is
  `--protocol` (gRPC, its default), the tuner's `-i` is `--autotune-protocol` (HTTP, its
  default; its gRPC client (grpc.aio) costs about four times the CPU per request of its HTTP
  one, and on 2 cores the client's CPU is the server's: benchmarks/client_cost_on_triton.py).

Then (`--repeats` N, 0 skips it) the winners (the config as written, each Model Analyzer
mode's recorded winner, autotune's written config; those recorded in --output count too, so
runs can be split by mode) are measured again on ONE tritonserver, paired, by each client of
`--remeasure-clients` in turn (default both: the real perf_analyzer 2.51 over --protocol, then
`autotune perf` over --autotune-protocol), every winner by the same client within a block:
benchmarks/triton_remeasure.py loads them all and runs N rounds in which their sweeps advance
together a point at a time (concurrency 1, 2, 4, ... until the p95 passes the budget, then a
binary search; the figure is the highest throughput within the budget), so winners are
compared seconds apart; each is also measured at the concurrency its tool reported.
model_analyzer_side-<model>.json holds both searches' figures (best feasible throughput by the
tool's own client, configs measured, wall time) and, per client, every re-measured point and
round, medians and ranges, autotune's winner over each other winner round by round (median and
range of the paired ratios) and the goal's checks on those (autotune >= 1.1x Model Analyzer
quick and >= brute, in no more wall time than quick). Why two clients: on 2 cores a client's
CPU per request decides how much of the machine the server gets; perf_analyzer spends 60-90
us a request, `autotune perf` over HTTP ~17 us (benchmarks/client_cost_on_triton.py), so a
config's rank can depend on the client, and the record shows both. `--pin` re-measures with
the client on CPU 0 and tritonserver with its python stubs on the others (taskset), so that
neither takes the other's CPU time: model_analyzer_side-<model>-pinned.json, beside the
unpinned record.
Every JSON has the date, machine, git revision, command and settings.

What the tuner's space holds for these python models (`tuner/run.py: model_space`), as it
does for any python model: it cannot look inside model.py, so max_batch_size goes up to what
the config declares (digits 64, resnet18 16; Model Analyzer goes to 128 or, quick, no bound),
it does not know that this model.py reads `intra_op_thread_count` (threads stay as written: 1
for digits, 2 for resnet18), and a precision variant of the model.onnx the python model loads
is not its to make (no int8). It searches batching on/off, max_batch_size, queue delay,
preferred batch size and the instance count. Neither side is given anything the other lacks.

Full run (long: hours; on a quiet machine, nothing else running):
    python benchmarks/model_analyzer_side.py
    python benchmarks/model_analyzer_side.py --models digits --modes brute --repeats 0  # then:
    python benchmarks/model_analyzer_side.py --modes none --repeats 3   # re-measure only
Smoke run (digits, a few small configs and trials, short windows; into a new temporary folder
unless --output names one):
    python benchmarks/model_analyzer_side.py --smoke

Installs on first use: scripts/install_model_analyzer.sh, install_triton_peer.sh and
install_perf_analyzer.sh (all under .cache/).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from autotune_on_triton import AutotuneSettings, load_result, run_autotune
from autotune_on_triton import write_result as write_autotune
from model_analyzer_run import (
    BUDGETS_MS,
    DEFAULT_PROTOCOL,
    MODEL_ANALYZER,
    RESULTS,
    TRITON,
    load_results,
    profile_config,
    run_profile,
    summarize,
    write_result,
)
from model_analyzer_run import MODES as MA_MODES
from peer import ROOT, check_outputs, install, run_main, triton
from python_models import ORT_TOLERANCE, build_bundled, reference, write_python_repository
from results_record import header, write_record
from triton_remeasure import (
    Contender,
    RemeasureClient,
    SweepSettings,
    autotune_client,
    group_contenders,
    paired_ratios,
    perf_analyzer_client,
    remeasure,
    slug,
    split_cpus,
    write_served,
)

MODES = (*MA_MODES, "autotune")
DEFAULT_MODES = ("quick", "autotune", "optuna")
# autotune's --time-budget as a share of Model Analyzer quick's wall time on the model.
AUTOTUNE_TIME_SHARE = 0.9
AUTOTUNE_TRIALS = 60
SMOKE_AUTOTUNE_TRIALS = 3
# The smoke run's tuner: short windows, its top 2 re-measured once.
SMOKE_AUTOTUNE_FLAGS = (
    *("--measurement-interval", "200"),
    *("--remeasure-top", "2", "--remeasure-repeats", "1"),
)
# The re-measure's perf_analyzer windows and the sweep's highest concurrency: by Little's law
# (concurrency = throughput x latency) nothing above them can meet the budget here (digits
# < 15,000 infer/s x 10 ms; resnet18 < 100 infer/s x 150 ms); resnet18's windows hold ~100
# requests at its rate.
REMEASURE_WINDOW_MS = {"digits": 1000, "resnet18": 3000}
SWEEP_MAX_CONCURRENCY = {"digits": 256, "resnet18": 32}
SMOKE_WINDOW_MS = {"digits": 500, "resnet18": 2000}
SMOKE_MAX_CONCURRENCY = 8
SMOKE_REPEATS = 2
GOAL_QUICK_RATIO = 1.1
REMEASURE_CLIENTS = ("perf_analyzer", "autotune")
# The tuner's own default protocol: its analyzer's HTTP client costs about a quarter of the CPU
# per request its gRPC client (grpc.aio) does, which on 2 cores is the server's CPU.
AUTOTUNE_PROTOCOL = "http"
LABELS = {
    "quick": "Model Analyzer quick",
    "optuna": "Model Analyzer optuna",
    "brute": "Model Analyzer brute",
    "autotune": "autotune",
}


def check_peer(wrapper: Path, repository: Path, models: list[str], scratch: Path) -> None:
    with triton(wrapper, repository, scratch / "check-triton.log") as server:
        for model in models:
            inputs, expected = reference(model)
            for protocol in ("grpc", "http"):
                check_outputs(server, protocol, model, inputs, expected, ORT_TOLERANCE)
    print(f"triton: {', '.join(models)} answer as in-process onnxruntime (grpc and http)")


def run_model_analyzer(
    model: str, mode: str, repository: Path, scratch: Path, paths: dict[str, Path], args: Any
) -> dict[str, Any]:
    run_dir = scratch / f"{model}-{mode}"
    run_dir.mkdir()
    config = profile_config(model, mode, repository, run_dir, paths, args.smoke, args.protocol)
    print(f"{model} {mode}: model-analyzer profile ...", flush=True)
    seconds = run_profile(paths["model_analyzer"], paths["triton"], config, run_dir)
    return summarize(model, mode, run_dir, seconds, args.smoke, config)


def recorded_quick(model: str, directory: Path, smoke: bool) -> dict[str, Any] | None:
    quick = [r for r in load_results(model, directory) if r["mode"] == "quick"]
    return quick[0] if quick and quick[0]["smoke"] == smoke else None


def autotune_settings(model: str, args: Any) -> AutotuneSettings:
    """The tuner's trials and time budget for `model`: a share of quick's wall time (recorded
    in --output, by this run or an earlier one), or --autotune-time-budget when given."""
    trials = args.autotune_trials or (SMOKE_AUTOTUNE_TRIALS if args.smoke else AUTOTUNE_TRIALS)
    extra = SMOKE_AUTOTUNE_FLAGS if args.smoke else ()
    budget: float | None = None
    source = "none: --trials bounds the run"
    if args.autotune_time_budget is not None:
        if args.autotune_time_budget > 0:
            budget, source = args.autotune_time_budget, "--autotune-time-budget"
    else:
        quick = recorded_quick(model, args.output, args.smoke)
        if quick is not None:
            budget = AUTOTUNE_TIME_SHARE * quick["wall_s"]
            source = (
                f"{AUTOTUNE_TIME_SHARE} x Model Analyzer quick's wall time "
                f"({quick['wall_s']:.0f} s, {quick['date']})"
            )
    return AutotuneSettings(args.autotune_protocol, trials, budget, source, args.seed, extra)


def contenders(model: str, repository: Path, directory: Path, smoke: bool) -> list[Contender]:
    """The config as written, then each recorded winner in --output (of a run of the same kind,
    smoke or full), in the order of LABELS."""
    found = [Contender("as written", (repository / model / "config.pbtxt").read_text(), None)]
    for result in load_results(model, directory):
        if result["smoke"] != smoke:
            print(f"{model}: {result['mode']}: its recorded run is of another kind (--smoke)")
        elif result["best"] is None:
            print(f"{model}: Model Analyzer {result['mode']} found nothing within the budget")
        else:
            best = result["best"]
            found.append(
                Contender(LABELS[result["mode"]], best["config_pbtxt"], best["concurrency"])
            )
    ours = load_result(model, directory)
    if ours is not None and ours["smoke"] == smoke and ours["winner"] is not None:
        winner = ours["winner"]
        found.append(Contender("autotune", winner["config_pbtxt"], winner["concurrency"]))
    return found


def search_rows(model: str, directory: Path) -> list[dict[str, Any]]:
    """Each recorded search of `model` as one row: its best feasible throughput by its own
    client, the configs it measured and its wall time."""
    rows = [
        _row(LABELS[result["mode"]], "perf_analyzer 2.51", result["best"], result)
        for result in load_results(model, directory)
    ]
    ours = load_result(model, directory)
    if ours is not None:
        winner = ours["winner"] and ours["winner"]["throughput"]
        row = _row("autotune", "autotune's analyzer", ours["best_feasible"], ours)
        rows.append(row | {"winner_remeasured_by_autotune": winner})
    return rows


def _row(
    label: str, client: str, best: dict[str, Any] | None, result: dict[str, Any]
) -> dict[str, Any]:
    """One tool's line of the table: its best feasible measurement and what the search took."""
    return {
        "label": label,
        "client": client,
        "best_feasible_infer_per_s": best and best["throughput"],
        "best_p95_ms": best and best["p95_ms"],
        "concurrency": best and best["concurrency"],
        "configs_measured": result["configs_measured"],
        "wall_s": result["wall_s"],
        "date": result["date"],
        "smoke": result["smoke"],
    }


def goal_checks(
    measured: list[dict[str, Any]], searches: list[dict[str, Any]]
) -> tuple[dict[str, dict[str, Any]], dict[str, bool]]:
    """autotune's winner over each other contender, paired round by round (median, range),
    and the goal's checks on those medians (those its figures allow)."""
    ratios = paired_ratios(measured, "autotune")
    checks: dict[str, bool] = {}
    if not ratios:
        return ratios, checks
    if "Model Analyzer quick" in ratios:
        checks[f"autotune >= {GOAL_QUICK_RATIO}x Model Analyzer quick"] = (
            ratios["Model Analyzer quick"]["median"] >= GOAL_QUICK_RATIO
        )
    if "Model Analyzer brute" in ratios:
        checks["autotune >= Model Analyzer brute"] = ratios["Model Analyzer brute"]["median"] >= 1
    walls = {row["label"]: row["wall_s"] for row in searches}
    if "autotune" in walls and "Model Analyzer quick" in walls:
        checks["autotune's wall time <= quick's"] = (
            walls["autotune"] <= walls["Model Analyzer quick"]
        )
    return ratios, checks


def remeasure_clients(args: Any, paths: dict[str, Path], cpus: str | None) -> list[RemeasureClient]:
    """The re-measure's clients in the order of --remeasure-clients: perf_analyzer over
    --protocol, our analyzer over --autotune-protocol (each tool's search's), on the CPUs
    `cpus` when pinned."""
    made = {
        "perf_analyzer": lambda: perf_analyzer_client(paths["perf_analyzer"], args.protocol, cpus),
        "autotune": lambda: autotune_client(args.autotune_protocol, cpus),
    }
    return [made[name]() for name in args.remeasure_clients]


def client_and_server_cpus(args: Any) -> tuple[str | None, str | None]:
    """With --pin, the re-measure's (client CPUs, server CPUs); else (None, None)."""
    return split_cpus(os.cpu_count() or 1) if args.pin else (None, None)


def side_by_side(
    model: str,
    repository: Path,
    scratch: Path,
    paths: dict[str, Path],
    args: Any,
) -> dict[str, Any]:
    """The recorded winners of `model` measured again, paired, on one tritonserver: by each
    re-measure client in turn, all of its rounds."""
    served = group_contenders(model, contenders(model, repository, args.output, args.smoke))
    window_ms = (SMOKE_WINDOW_MS if args.smoke else REMEASURE_WINDOW_MS)[model]
    max_concurrency = SMOKE_MAX_CONCURRENCY if args.smoke else SWEEP_MAX_CONCURRENCY[model]
    searches = search_rows(model, args.output)
    folder = scratch / f"{model}-remeasure"
    write_served(model, repository, served, folder / "repository")
    client_cpus, server_cpus = client_and_server_cpus(args)
    by_client = []
    for client in remeasure_clients(args, paths, client_cpus):
        settings = SweepSettings(BUDGETS_MS[model], max_concurrency, window_ms, client)
        started = time.monotonic()
        log = folder / f"tritonserver-{slug(client.name)}.log"
        with triton(
            paths["triton"],
            folder / "repository",
            log,
            ["--model-control-mode", "explicit"],
            cpus=server_cpus,
        ) as server:
            measured = remeasure(server, model, served, settings, args.repeats, folder)
        ratios, checks = goal_checks(measured, searches)
        by_client.append(
            {
                "client": client.name,
                "protocol": client.protocol,
                "contenders": measured,
                "paired_ratios": ratios,
                "goal": checks,
                "wall_s": round(time.monotonic() - started, 1),
            }
        )
    return {
        **header("model_analyzer_side"),
        "model": model,
        "budget_p95_ms": BUDGETS_MS[model],
        "smoke": args.smoke,
        "tools": {
            "server": TRITON,
            "model_analyzer": MODEL_ANALYZER,
            "clients": {
                "perf_analyzer": "perf_analyzer 2.51 (tritonclient[all]==2.51.0)",
                "autotune": "autotune perf (this revision)",
            },
        },
        "settings": {
            "model_analyzer_protocol": args.protocol,
            "autotune_protocol": args.autotune_protocol,
            "repeats": args.repeats,
            "window_ms": window_ms,
            "max_concurrency": max_concurrency,
            "pinned": {"client_cpus": client_cpus, "server_cpus": server_cpus},
            "client_runs": "time windows, -s 20 -r 15, up to 2 runs a point until stable",
            "sweep": "concurrency 1, 2, 4, ... until a p95 over the budget, then a binary "
            "search between the last point within it and that one; the figure: the highest "
            "throughput within the budget",
            "pairing": "every contender loaded throughout; in each round the sweeps advance "
            "together, a point of each in turn, the order rotating by round; ratios are taken "
            "within each round",
        },
        "searches": searches,
        "remeasure": by_client,
    }


def range_text(summary: dict[str, Any] | None, spec: str) -> str:
    if summary is None:
        return "-"
    return f"{summary['median']:{spec}} [{summary['min']:{spec}}-{summary['max']:{spec}}]"


def print_side_by_side(result: dict[str, Any]) -> None:
    model, budget = result["model"], result["budget_p95_ms"]
    print(f"\n{model}, p95 <= {budget:g} ms: the searches (each measured by its own client)")
    print(f"{'tool':<22} {'best feasible infer/s':>22} {'p95 ms':>7} {'configs':>7} {'wall':>9}")
    for row in result["searches"]:
        rate = row["best_feasible_infer_per_s"]
        shown = f"{rate:>22,.1f} {row['best_p95_ms']:>7.2f}" if rate else f"{'none':>22} {'-':>7}"
        smoke = "  (smoke)" if row["smoke"] else ""
        print(
            f"{row['label']:<22} {shown} {row['configs_measured']:>7} "
            f"{row['wall_s'] / 60:>5.1f} min  [{row['date']}]{smoke}"
        )
    for block in result["remeasure"]:
        print(
            f"\n{model}: each winner on one tritonserver, {block['client']} over "
            f"{block['protocol']}, {result['settings']['repeats']} paired round(s): the highest "
            "infer/s within the budget, median [range]"
        )
        for entry in block["contenders"]:
            concurrencies = ",".join(str(c) if c else "-" for c in entry["best_concurrencies"])
            own = "; ".join(
                f"at its c{c}: {range_text(v['infer_per_s'], ',.0f')} infer/s, "
                f"p95 {range_text(v['p95_ms'], '.1f')} ms"
                for c, v in entry["own_concurrency"].items()
            )
            print(
                f"  {' = '.join(entry['labels']):<40} "
                f"{range_text(entry['best_infer_per_s'], ',.1f')} infer/s at c{concurrencies}, "
                f"p95 {range_text(entry['best_p95_ms'], '.2f')} ms{'; ' + own if own else ''}"
            )
        for label, ratio in block["paired_ratios"].items():
            print(f"  autotune / {label}, round by round: {range_text(ratio, '.2f')}")
        for name, held in block["goal"].items():
            print(f"  goal: {name}: {'yes' if held else 'NO'}")


def write_side_by_side(result: dict[str, Any], directory: Path) -> Path:
    """`result` as model_analyzer_side-<model>.json in `directory` (-<model>-pinned.json for
    a pinned re-measure, so that the two are kept side by side)."""
    pinned = "-pinned" if result["settings"]["pinned"]["client_cpus"] is not None else ""
    return write_record(f"model_analyzer_side-{result['model']}{pinned}", result, directory)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--models", help="comma-separated (default: digits,resnet18; smoke: digits)"
    )
    parser.add_argument(
        "--modes",
        default=",".join(DEFAULT_MODES),
        help=f"comma-separated, run in this order: {', '.join(MODES)}; 'none': re-measure only",
    )
    parser.add_argument(
        "--repeats", type=int, help="re-measure rounds (default 3; smoke 2; 0: none)"
    )
    parser.add_argument(
        "--protocol",
        choices=("grpc", "http"),
        default=DEFAULT_PROTOCOL,
        help="Model Analyzer's client_protocol and perf_analyzer's in the re-measure",
    )
    parser.add_argument(
        "--autotune-protocol",
        choices=("grpc", "http"),
        default=AUTOTUNE_PROTOCOL,
        help="the tuner's -i and our analyzer's in the re-measure",
    )
    parser.add_argument(
        "--remeasure-clients",
        default=",".join(REMEASURE_CLIENTS),
        help="comma-separated, measured in this order: perf_analyzer, autotune",
    )
    parser.add_argument(
        "--pin",
        action="store_true",
        help="re-measure with the client on CPU 0 and tritonserver on the others (taskset)",
    )
    parser.add_argument(
        "--autotune-trials",
        type=int,
        help=f"default {AUTOTUNE_TRIALS}; smoke {SMOKE_AUTOTUNE_TRIALS}",
    )
    parser.add_argument(
        "--autotune-time-budget",
        type=float,
        metavar="SECONDS",
        help=f"default: {AUTOTUNE_TIME_SHARE} x Model Analyzer quick's wall time; 0: none",
    )
    parser.add_argument("--seed", type=int, default=0, help="autotune's")
    parser.add_argument(
        "--smoke", action="store_true", help="digits, a few small configs and trials, short windows"
    )
    parser.add_argument(
        "--output",
        type=Path,
        help="folder of the JSON files (default: benchmarks/results; smoke: a new temporary one)",
    )
    parser.add_argument(
        "--keep",
        type=Path,
        metavar="FOLDER",
        help="run in this new folder and keep it (logs, CSVs, reports, repositories)",
    )
    args = parser.parse_args()
    args.models = (args.models or ("digits" if args.smoke else ",".join(BUDGETS_MS))).split(",")
    args.modes = [] if args.modes == "none" else args.modes.split(",")
    for name in args.models:
        if name not in BUDGETS_MS:
            parser.error(f"--models: {name!r} is not one of {', '.join(BUDGETS_MS)}")
    args.remeasure_clients = args.remeasure_clients.split(",")
    for name in args.remeasure_clients:
        if name not in REMEASURE_CLIENTS:
            parser.error(f"--remeasure-clients: {name!r} is not one of perf_analyzer, autotune")
    for name in args.modes:
        if name not in MODES:
            parser.error(f"--modes: {name!r} is not one of {', '.join(MODES)}")
    if args.repeats is None:
        args.repeats = SMOKE_REPEATS if args.smoke else 3
    if args.output is None:
        args.output = Path(tempfile.mkdtemp(prefix="ma-side-smoke-")) if args.smoke else RESULTS
    if args.keep is not None and args.keep.exists():
        parser.error(f"--keep: {args.keep} already exists")
    return args


def main() -> None:
    args = parse_args()
    if not all((ROOT / "model_repository" / m / "1" / "model.onnx").is_file() for m in args.models):
        build_bundled()
    paths = {
        "model_analyzer": install("install_model_analyzer.sh"),
        "triton": install("install_triton_peer.sh"),
        "perf_analyzer": install("install_perf_analyzer.sh"),
    }
    args.output.mkdir(parents=True, exist_ok=True)
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    print(f"results: {args.output}")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="model-analyzer-side-") as scratch_name:
        scratch = Path(scratch_name) if args.keep is None else args.keep.resolve()
        scratch.mkdir(parents=True, exist_ok=True)
        repository = scratch / "triton-repository"
        write_python_repository(args.models, repository)
        check_peer(paths["triton"], repository, args.models, scratch)
        for model in args.models:
            for mode in args.modes:
                if mode == "autotune":
                    settings = autotune_settings(model, args)
                    budget = settings.time_budget_s
                    print(
                        f"{model} autotune: --trials {settings.trials}, --time-budget "
                        f"{'none' if budget is None else f'{budget:.0f} s'} "
                        f"({settings.time_budget_from}) ...",
                        flush=True,
                    )
                    run_dir = scratch / f"{model}-autotune"
                    run_dir.mkdir()
                    ours = run_autotune(
                        model,
                        BUDGETS_MS[model],
                        repository,
                        run_dir,
                        paths["triton"],
                        settings,
                        args.smoke,
                    )
                    write_autotune(ours, args.output)
                else:
                    result = run_model_analyzer(model, mode, repository, scratch, paths, args)
                    write_result(result, args.output)
            if args.repeats > 0:
                result = side_by_side(model, repository, scratch, paths, args)
                write_side_by_side(result, args.output)
                print_side_by_side(result)
    print(f"\nwall time: {(time.monotonic() - started) / 60:.1f} min; results in {args.output}")


if __name__ == "__main__":
    run_main(main)
