"""Our server against NVIDIA Triton Inference Server 2.51 and in-process onnxruntime on this
machine: same models, same client (NVIDIA's perf_analyzer 2.51), one run, one table.

Run (the full table; about an hour and a quarter with the defaults, on a quiet machine):
    python benchmarks/vs_triton.py [--markdown]
Smoke run (digits, HTTP, concurrency 1, one repeat, 1 s windows, one start-up each):
    python benchmarks/vs_triton.py --smoke

Servers, each started per model on free 127.0.0.1 ports with only that model:
- `ours`: the bundled model as it is (`simple`, `digits`, `resnet18` on our onnxruntime
  backend; `--ours-backend python` serves `simple` as the python model instead);
- `triton`: tritonserver 2.51 from PyPI's nvidia-pytriton wheel, which has no onnxruntime
  backend: `simple` is numpy add/sub in a python model, `digits` and `resnet18` run onnxruntime
  inside a python model, as CPU users of that wheel do (benchmarks/python_models.py);
- `ours-python`: our server on that python-model folder, the same model.py Triton runs.
Every server's outputs are checked with tritonclient over every protocol measured (equal to
numpy's for `simple`, to in-process onnxruntime's within 1e-4 otherwise) before anything is
measured.

What is measured, per model (`--models`), protocol (`--protocols`, or `--modes` for gRPC
streaming and system shared memory) and concurrency (`--concurrency`, else per model:
simple 1 8, digits 1 8 32, resnet18 1 4 16): perf_analyzer runs with `--window-ms` windows
(else 4 s, resnet18 8 s: ~20 ms an image), `-s 20`, the servers interleaved within each round
(ours, Triton, ours-python, then in-process onnxruntime), `--repeats` rounds. A run whose
windows never stabilise is measured again up to `--attempts` times, then left out (`n=`).
- throughput and p95: each server's median infer/s [range], median p95, ratios of the medians
  to Triton's;
- ceiling (`digits`, `resnet18`): in-process onnxruntime (benchmarks/in_process.py) at the
  batch size the cell allows (its concurrency, at most max_batch_size) with the threads of the
  model's config, warmed up for one window and measured for three (what perf_analyzer reports),
  once per round in the first protocol's cells; each server's median over its median;
- server resources during each run (benchmarks/usage.py): CPU seconds of the server's whole
  process tree (python-backend stubs included) per 1,000 requests it answered, its peak RSS,
  and the rows per batch it ran;
- start-up (`--startup-repeats`, before the rest): `autotune serve --model-repository
  model_repository` (the bundled repository) launched to /v2/health/ready answering 200, and
  the same for Triton and for ours on the python-model repository of the models measured
  (benchmarks/startup.py).
Then it prints the tables (`--markdown`: in the layout of docs/benchmarks.md, with the date,
machine, load average and command line). Servers are stopped at the end, on Ctrl-C too.

Raw results: benchmarks/results/vs_triton.json, or vs_triton-<models>-<modes>.json (names
joined by "+") when --models or --modes/--protocols leave out or add to the defaults:
results_record's header, the settings, the load averages, and every run the tables are built
from (vs_triton_report.raw). A --smoke run writes into a new temporary folder, --output into
the one it names.

Installs on first use: scripts/install_perf_analyzer.sh and scripts/install_triton_peer.sh
(both under .cache/); missing generated model files are built first
(scripts/build_model_repository.py).
"""

from __future__ import annotations

import argparse
import datetime
import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnxruntime as ort
import results_record
from in_process import InProcess
from peer import (
    ROOT,
    SIMPLE_MODEL,
    Server,
    check_outputs,
    install,
    measure,
    ours,
    python_model,
    revision,
    run_main,
    triton,
)
from python_models import build_bundled, bundled_config, check_data, write_python_repository
from results_record import add_output_option, header, results_directory, write_record
from startup import Startup, measure_startups
from usage import UsageMonitor
from vs_triton_report import Ceiling, Results, Sample, markdown, print_tables, raw

from gate.machine import describe_machine


@dataclass(frozen=True)
class Plan:
    """A model's defaults: concurrencies and perf_analyzer window."""

    concurrency: tuple[int, ...]
    window_ms: int


PLANS = {
    "simple": Plan((1, 8), 4000),
    "digits": Plan((1, 8, 32), 4000),
    "resnet18": Plan((1, 4, 16), 8000),
}
CEILING_MODELS = ("digits", "resnet18")
SERVERS = ("ours", "triton", "ours-python")
PROTOCOLS = ("http", "grpc")
# mode -> (protocol, perf_analyzer flags): how the requests travel
MODES: dict[str, tuple[str, tuple[str, ...]]] = {
    "grpc": ("grpc", ()),
    "http": ("http", ()),
    "grpc-streaming": ("grpc", ("--streaming",)),
    "grpc-shm": ("grpc", ("--shared-memory", "system")),
    "http-shm": ("http", ("--shared-memory", "system")),
}
# --smoke: what it sets unless the flag is given
SMOKE = {
    "models": ["digits"],
    "protocols": ["http"],
    "concurrency": [1],
    "repeats": 1,
    "window_ms": 1000,
    "startup_repeats": 1,
}
DEFAULTS = {
    "models": list(PLANS),
    "protocols": list(PROTOCOLS),
    "repeats": 3,
    "startup_repeats": 5,
}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=PLANS, help="default: all")
    parser.add_argument("--protocols", nargs="+", choices=PROTOCOLS, help="default: http grpc")
    parser.add_argument(
        "--modes",
        nargs="+",
        choices=MODES,
        help="instead of --protocols: how requests travel (plain gRPC / HTTP, gRPC streaming, "
        "system shared memory)",
    )
    parser.add_argument(
        "--concurrency", type=int, nargs="+", help="for every model (default: per model)"
    )
    parser.add_argument("--repeats", type=int, help="rounds per cell (default 3)")
    parser.add_argument(
        "--window-ms", type=int, help="perf_analyzer's -p (default: 4000, resnet18 8000)"
    )
    parser.add_argument(
        "--attempts", type=int, default=3, help="tries per run when windows are not stable"
    )
    parser.add_argument(
        "--servers", nargs="+", choices=SERVERS, default=list(SERVERS), help="default: all"
    )
    parser.add_argument(
        "--ours-backend",
        choices=("onnxruntime", "python"),
        default="onnxruntime",
        help="`ours` serves `simple` as bundled (onnxruntime) or as the python model",
    )
    parser.add_argument(
        "--ours-flag",
        action="append",
        default=[],
        metavar="FLAG",
        help="a flag for our servers, e.g. --ours-flag=--grpc-front-end=grpcio (repeatable)",
    )
    parser.add_argument(
        "--startup-repeats", type=int, help="starts per server, 0 to skip (default 5)"
    )
    parser.add_argument(
        "--markdown", action="store_true", help="print the tables as docs/benchmarks.md has them"
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="digits, HTTP, c1, one repeat, 1 s windows, one start-up (flags given still count)",
    )
    add_output_option(parser)
    args = parser.parse_args()
    for name, default in DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, SMOKE.get(name, default) if args.smoke else default)
    if args.smoke:
        for name in ("concurrency", "window_ms"):
            if getattr(args, name) is None:
                setattr(args, name, SMOKE[name])
    if args.modes is None:
        args.modes = list(args.protocols)
    args.servers = [name for name in SERVERS if name in args.servers]  # the columns' order
    args.output = results_directory(args.output, args.smoke)
    return args


def record_name(args: argparse.Namespace) -> str:
    """vs_triton, with the models and the modes measured when they are not the defaults: a run
    of a part of the table does not overwrite the whole table's figures."""
    return results_record.record_name(
        "vs_triton", {"models": (args.models, list(PLANS)), "modes": (args.modes, PROTOCOLS)}
    )


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """What the run measured, and how."""
    return {
        "models": args.models,
        "modes": {mode: MODES[mode] for mode in args.modes},
        "concurrency": {model: concurrencies(args, model) for model in args.models},
        "window_ms": {model: window_ms(args, model) for model in args.models},
        "repeats": args.repeats,
        "attempts": args.attempts,
        "servers": args.servers,
        "ours_backend": args.ours_backend,
        "ours_flags": args.ours_flag,
        "startup_repeats": args.startup_repeats,
        "perf_analyzer": "2.51, -s 20 -r 15",
        "onnxruntime": ort.__version__,
    }


def concurrencies(args: argparse.Namespace, model: str) -> list[int]:
    return list(args.concurrency or PLANS[model].concurrency)


def window_ms(args: argparse.Namespace, model: str) -> int:
    return int(args.window_ms or PLANS[model].window_ms)


def write_repositories(model: str, args: argparse.Namespace, scratch: Path) -> dict[str, Path]:
    """server -> a repository holding only `model`: ours as bundled (or `simple` as the python
    model with --ours-backend python), ours-python and Triton the same python-model folder."""
    python_repository = scratch / f"python-{model}"
    write_python_repository([model], python_repository)
    ours_repository = scratch / f"ours-{model}"
    if model == "simple" and args.ours_backend == "python":
        python_model(bundled_config(model), SIMPLE_MODEL, ours_repository / model)
    else:
        shutil.copytree(ROOT / "model_repository" / model, ours_repository / model)
    return {"ours": ours_repository, "ours-python": python_repository, "triton": python_repository}


@contextmanager
def servers_for(
    model: str, args: argparse.Namespace, wrapper: Path, scratch: Path
) -> Iterator[list[Server]]:
    """The servers of `args.servers` on `model`, started, outputs checked; stopped on exit."""
    repositories = write_repositories(model, args, scratch)
    protocols = sorted({MODES[mode][0] for mode in args.modes})
    inputs, expected, tolerance = check_data(model)
    with ExitStack() as stack:
        started: list[Server] = []
        for name in args.servers:
            log = scratch / f"{name}-{model}.log"
            if name == "triton":
                server = stack.enter_context(triton(wrapper, repositories[name], log))
            else:
                server = stack.enter_context(
                    ours(repositories[name], log, args.ours_flag, name=name)
                )
            for protocol in protocols:
                if protocol in server.urls:
                    check_outputs(server, protocol, model, inputs, expected, tolerance)
            print(f"{model}: {name} at {server.urls}, outputs checked", flush=True)
            started.append(server)
        yield started


def measure_model(
    model: str,
    args: argparse.Namespace,
    paths: dict[str, Path],
    scratch: Path,
    results: Results,
) -> None:
    """Every cell of `model`: the servers interleaved per round, in-process onnxruntime after
    them (first protocol only)."""
    runtime = InProcess(model) if model in CEILING_MODELS else None
    window = window_ms(args, model)
    max_batch = max(1, bundled_config(model).max_batch_size)
    with servers_for(model, args, paths["triton"], scratch) as servers:
        for index, mode in enumerate(args.modes):
            protocol, mode_flags = MODES[mode]
            for concurrency in concurrencies(args, model):
                results.cells.append((model, mode, concurrency))
                for repeat in range(1, args.repeats + 1):
                    for server in servers:
                        if protocol not in server.urls:
                            continue
                        label = f"{model} {mode} c{concurrency} #{repeat} {server.name:<11}"
                        with UsageMonitor(server, model) as monitor:
                            run = measure(
                                args.attempts,
                                label,
                                paths["perf_analyzer"],
                                server,
                                model,
                                protocol,
                                concurrency,
                                window,
                                scratch,
                                f"{model} {mode}",
                                mode_flags,
                            )
                        if run is not None:
                            results.samples.append(Sample(model, mode, run, monitor.usage))
                    if runtime is not None and index == 0:
                        batch = min(concurrency, max_batch)
                        rate = runtime.rate(batch, 3 * window / 1000, warmup_s=window / 1000)
                        print(
                            f"{model} c{concurrency} #{repeat} in-process (batch {batch})"
                            f" {rate:>9,.0f} infer/s",
                            flush=True,
                        )
                        results.ceilings.append(
                            Ceiling(model, concurrency, batch, runtime.threads, rate)
                        )


def startups(args: argparse.Namespace, wrapper: Path, scratch: Path) -> list[Startup]:
    if args.startup_repeats <= 0:
        return []
    bundled = ROOT / "model_repository"
    python_repository = scratch / "startup-python"
    write_python_repository(args.models, python_repository)
    count = sum(1 for path in bundled.iterdir() if (path / "config.pbtxt").is_file())
    python_label = f"python models: {', '.join(args.models)}"
    candidates = [("ours", f"model_repository ({count} models)", bundled)]
    candidates.append(("ours", python_label, python_repository))
    if "triton" in args.servers:
        candidates.append(("triton", python_label, python_repository))
    return measure_startups(candidates, wrapper, args.startup_repeats, scratch)


def preamble(args: argparse.Namespace, loads: Sequence[str]) -> list[str]:
    machine = describe_machine()
    command = shlex.join(["python", "benchmarks/vs_triton.py", *sys.argv[1:]])
    windows = ", ".join(f"{m} {window_ms(args, m)} ms" for m in args.models)
    return [
        f"{datetime.date.today().isoformat()}, `{command}`, revision {revision()}.",
        f"Machine: {machine['logical_cpus']} cores ({machine['usable_cpus']} usable),"
        f" {machine['cpu_model']}, {machine['memory_gib']} GiB, Python {machine['python']},"
        f" onnxruntime {ort.__version__}; load average (1/5/15 min) {'; '.join(loads)}.",
        f"perf_analyzer 2.51, `-s 20`, windows: {windows}; {args.repeats} interleaved"
        f" round(s) per cell; ours: {', '.join(args.ours_flag) or 'no extra flags'}"
        f"{', simple on python' if args.ours_backend == 'python' else ''}.",
    ]


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} / {five:.2f} / {fifteen:.2f}"


def main() -> None:
    args = parse_args()
    build_bundled()
    paths = {
        "perf_analyzer": install("install_perf_analyzer.sh"),
        "triton": install("install_triton_peer.sh"),
    }
    loads = [f"{load_average()} at the start"]
    print(f"machine: {os.cpu_count()} cores, load average {load_average()}", flush=True)
    results = Results([], [], [], list(args.servers), [], args.repeats)
    with tempfile.TemporaryDirectory(prefix="vs-triton-") as scratch_name:
        scratch = Path(scratch_name)
        results.startups.extend(startups(args, paths["triton"], scratch))
        for model in args.models:
            measure_model(model, args, paths, scratch, results)
    loads.append(f"{load_average()} at the end")
    print()
    if args.markdown:
        print(markdown(results, preamble(args, loads)))
    else:
        print("\n".join(preamble(args, loads)))
        print_tables(results)
    record = {
        **header("vs_triton"),
        "settings": settings(args),
        "load_average": loads,
        **raw(results),
    }
    write_record(record_name(args), record, args.output)


if __name__ == "__main__":
    run_main(main)
