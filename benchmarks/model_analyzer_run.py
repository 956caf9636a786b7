"""NVIDIA Triton Model Analyzer 1.58 on the tuner's benchmark models and budgets, on Triton 2.51,
for benchmarks/model_analyzer_side.py (the script; this module is not one).

For each model and mode (`quick`, `optuna`, `brute`) it runs `model-analyzer profile` and
writes benchmarks/results/model_analyzer-<model>-<mode>.json: the best feasible throughput
(the highest perf_throughput among Model Analyzer's measurements whose p95 meets the budget),
the configs and measurements it took, its wall time and the winning config;
`load_results(model)` reads them back (benchmarks/tuner_quality.py prints them).

How Model Analyzer runs here:
- Triton 2.51 from the nvidia-pytriton wheel has no onnxruntime backend, so each model is a
  python model running the same model.onnx on onnxruntime (a batch of requests joined into one
  session run, as our onnxruntime backend does; `intra_op_thread_count` from the config's
  parameters), with the bundled config.pbtxt otherwise unchanged (max_batch_size, inputs,
  dynamic batching, one CPU instance). Triton is started once with that repository and every
  model checked with tritonclient against in-process onnxruntime before Model Analyzer runs.
- `model-analyzer profile` with triton_launch_mode local (it starts the Triton wrapper of
  scripts/install_triton_peer.sh itself, on free 127.0.0.1 ports), perf_analyzer 2.51
  (scripts/install_perf_analyzer.sh), cpu_only, objective perf_throughput, the budget as
  constraint `perf_latency_p95: {max: ms}`, each run in a scratch folder (its output
  repository, checkpoints, results CSVs and summary report) deleted afterwards unless --keep.
  The wall time includes its summary step (which writes the CSVs read here: a few seconds);
  the detailed reports are skipped. "configs" counts the model configs it measured (its
  default included), "measured" the rows of its results CSV (one per config and concurrency).
- Search spaces, Model Analyzer's defaults for a single model:
  quick: its default config first (the config as written, at concurrency 2 x max_batch_size
  x instances), then hill climbing from max_batch_size 1, one instance over max_batch_size
  (powers of two, no upper bound) x instance count (1, 2, 3, ..., no upper bound), dynamic
  batching on, concurrency 2 x max_batch_size x instances, a step kept only when it meets the
  constraint (or comes closer to it); then its top 3 configs (and the default) swept over
  concurrency 1..1024 (powers of two, then a binary search at the constraint boundary).
  optuna: its default config first, then TPE over max_batch_size 1..128 (powers of two) x
  instances 1..5 x concurrency 1..1024 (powers of two), 440 points, dynamic batching on; 22 to
  44 trials (5-10% of the space), ending early after 10 trials without improvement once 22
  are done; then the same concurrency sweep of its top 3. Its score is the throughput gain
  over the default config: the budget is not in it (it only ranks the top configs).
  Neither searches intra_op_thread_count, queue delay, preferred batch size or precision.
  On resnet18 its concurrency is capped at 32 and its optuna trials kept at 22-44
  (MODEL_SETTINGS says why); each run's JSON records the settings changed.
  brute (not run unless named): its automatic sweep, max_batch_size 1..128 (powers of two) x
  instances 1..5, each config swept over concurrency as above.
"""

from __future__ import annotations

import contextlib
import csv
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil
from peer import free_port, stop_group
from results_record import RESULTS, header, write_record

from common.tied_child import tied_command

BUDGETS_MS = {"digits": 10.0, "resnet18": 150.0}
MODES = ("quick", "optuna", "brute")
MODEL_ANALYZER = "triton-model-analyzer 1.58.0"
TRITON = "tritonserver 2.51.0 (nvidia-pytriton 0.7.0), python backend"
DEFAULT_PROTOCOL = "grpc"  # Model Analyzer's default client_protocol
# What --smoke changes in Model Analyzer's settings: a few small configs, low concurrency
# (its default config still runs at 2 x max_batch_size x instances), 1 s time windows stable
# within 50% (by default it enlarges its windows whenever they are not stable within 10%).
SMOKE_SHARED: dict[str, Any] = {
    "run_config_search_max_model_batch_size": 4,
    "run_config_search_max_instance_count": 1,
    "run_config_search_max_concurrency": 8,
    "num_configs_per_model": 1,
    "perf_analyzer_flags": {
        "measurement-mode": "time_windows",
        "measurement-interval": 1000,
        "stability-percentage": 50,
    },
}
# resnet18 runs at < 100 infer/s here, so by Little's law (concurrency = throughput x latency)
# no concurrency above ~15 can meet its 150 ms p95: Model Analyzer's concurrency is capped at
# 32 for it, which removes only points that cannot be feasible. Unbounded, each of those
# points took minutes (at 40 infer/s a window of its 400 requests lasts 10 s, and it keeps
# enlarging windows that are not stable within 10%). Its optuna mode sizes its trial budget
# by its space (5-10% of it), so the default space's 22-44 trials are set explicitly.
MODEL_SETTINGS: dict[str, dict[str, dict[str, Any]]] = {
    "resnet18": {
        "quick": {"run_config_search_max_concurrency": 32},
        "brute": {"run_config_search_max_concurrency": 32},
        "optuna": {
            "run_config_search_max_concurrency": 32,
            "optuna_min_trials": 22,
            "optuna_max_trials": 44,
        },
    },
}
SMOKE_SETTINGS: dict[str, dict[str, Any]] = {
    "quick": SMOKE_SHARED,
    "brute": SMOKE_SHARED,
    "optuna": {
        **SMOKE_SHARED,
        "optuna_min_trials": 2,
        "optuna_max_trials": 3,
        "concurrency_sweep_disable": True,
    },
}


def profile_config(
    model: str,
    mode: str,
    repository: Path,
    run_dir: Path,
    paths: dict[str, Path],
    smoke: bool,
    protocol: str = DEFAULT_PROTOCOL,
) -> dict[str, Any]:
    """Model Analyzer's profile config (JSON is YAML) for one model and search mode, its
    perf_analyzer speaking `protocol`."""
    http, grpc, metrics = free_port(), free_port(), free_port()
    config: dict[str, Any] = {
        "model_repository": str(repository),
        "output_model_repository_path": str(run_dir / "output_model_repository"),
        "override_output_model_repository": True,
        "checkpoint_directory": str(run_dir / "checkpoints"),
        "export_path": str(run_dir / "export"),
        "run_config_search_mode": mode,
        "triton_launch_mode": "local",
        "triton_server_path": str(paths["triton"]),
        "triton_output_path": str(run_dir / "triton.log"),
        "triton_http_endpoint": f"127.0.0.1:{http}",
        "triton_grpc_endpoint": f"127.0.0.1:{grpc}",
        "triton_metrics_url": f"http://127.0.0.1:{metrics}/metrics",
        "triton_server_flags": {
            "http-address": "127.0.0.1",
            "grpc-address": "127.0.0.1",
            "metrics-address": "127.0.0.1",
        },
        "perf_analyzer_path": str(paths["perf_analyzer"]),
        "client_protocol": protocol,
        # The summary step writes the results CSVs read here; the detailed reports are skipped.
        "skip_detailed_reports": True,
        "objectives": {"perf_throughput": 10},
        "inference_output_fields": [
            "model_name",
            "batch_size",
            "concurrency",
            "model_config_path",
            "instance_group",
            "max_batch_size",
            "satisfies_constraints",
            "perf_throughput",
            "perf_latency_p95",
            "perf_latency_p99",
        ],
        "profile_models": {
            model: {
                "cpu_only": True,
                "constraints": {"perf_latency_p95": {"max": BUDGETS_MS[model]}},
            }
        },
    }
    config.update(MODEL_SETTINGS.get(model, {}).get(mode, {}))
    if smoke:
        config.update(SMOKE_SETTINGS[mode])
    return config


def run_profile(command: Path, triton: Path, config: dict[str, Any], run_dir: Path) -> float:
    """`model-analyzer profile` with `config`; its wall time in seconds."""
    config_path = run_dir / "config.yaml"
    config_path.write_text(json.dumps(config, indent=2))
    log = run_dir / "model-analyzer.log"
    started = time.monotonic()
    # A session of its own: Model Analyzer starts tritonserver and perf_analyzer, which a
    # signal to it alone would leave running, so the whole group is stopped.
    with log.open("wb") as out:
        process = subprocess.Popen(
            tied_command([str(command), "profile", "-f", str(config_path)]),
            cwd=run_dir,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        returncode = process.wait()
    finally:
        stop_group(process)
        stop_strays(triton, run_dir.parent)
    seconds = time.monotonic() - started
    if returncode != 0:
        tail = log.read_text(errors="replace")[-4000:]
        raise SystemExit(f"model-analyzer profile failed ({returncode}):\n{tail}")
    return seconds


def stop_strays(triton: Path, scratch: Path) -> None:
    """SIGKILL the tritonserver (and its python backend stubs) left serving `scratch`'s
    repositories: Model Analyzer starts tritonserver in a session of its own, which stopping
    Model Analyzer's group (an interrupted run) leaves running."""
    installed, marker = str(triton.resolve().parents[1]), str(scratch)  # the peer install
    for process in psutil.process_iter(["cmdline"]):
        arguments = process.info["cmdline"] or [""]
        if arguments[0].startswith(installed) and any(marker in a for a in arguments):
            with contextlib.suppress(psutil.Error):
                process.kill()


def read_measurements(run_dir: Path) -> list[dict[str, Any]]:
    """Every measurement of metrics-model-inference.csv (one row per config and concurrency)."""
    path = run_dir / "export" / "results" / "metrics-model-inference.csv"
    if not path.is_file():
        tail = (run_dir / "model-analyzer.log").read_text(errors="replace")[-4000:]
        raise SystemExit(f"Model Analyzer wrote no {path}:\n{tail}")
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    return [
        {
            "config": row["Model Config Path"],
            "concurrency": int(row["Concurrency"]),
            "max_batch_size": int(row["Max Batch Size"]),
            "instance_group": row["Instance Group"],
            "throughput": float(row["Throughput (infer/sec)"]),
            "p95_ms": float(row["p95 Latency (ms)"]),
            "p99_ms": float(row["p99 Latency (ms)"]),
            "satisfies_constraints": row["Satisfies Constraints"].strip() == "Yes",
        }
        for row in rows
    ]


def winning_config(run_dir: Path, variant: str) -> str:
    """The winning variant's config.pbtxt as Model Analyzer wrote it."""
    path = run_dir / "output_model_repository" / variant / "config.pbtxt"
    return path.read_text() if path.is_file() else f"(no {path.name} for {variant})"


def summarize(
    model: str,
    mode: str,
    run_dir: Path,
    seconds: float,
    smoke: bool,
    config: dict[str, Any],
) -> dict[str, Any]:
    """The run's figures, after the common header (results_record.header)."""
    measurements = read_measurements(run_dir)
    budget = BUDGETS_MS[model]
    feasible = [m for m in measurements if m["p95_ms"] <= budget]
    best = max(feasible, key=lambda m: m["throughput"], default=None)
    changed = {
        "client_protocol",
        *SMOKE_SETTINGS[mode],
        *MODEL_SETTINGS.get(model, {}).get(mode, {}),
    }
    settings = {key: config[key] for key in sorted(changed) if key in config}
    return {
        **header("model_analyzer"),
        "model": model,
        "mode": mode,
        "budget_p95_ms": budget,
        "best": best and {**best, "config_pbtxt": winning_config(run_dir, best["config"])},
        "configs_measured": len({m["config"] for m in measurements}),
        "measurements": len(measurements),
        "wall_s": round(seconds, 1),
        "smoke": smoke,
        "settings": settings,
        "tools": {"model_analyzer": MODEL_ANALYZER, "server": TRITON},
        "all_measurements": measurements,
    }


def write_result(result: dict[str, Any], directory: Path) -> Path:
    """`result` as model_analyzer-<model>-<mode>.json in `directory`."""
    return write_record(f"model_analyzer-{result['model']}-{result['mode']}", result, directory)


def load_results(model: str, directory: Path = RESULTS) -> list[dict[str, Any]]:
    """Model Analyzer's recorded runs for `model`, one dict per mode (quick, optuna, brute), as
    `summarize` wrote them: the header (results_record.header: benchmark, date, machine,
    revision, command), model, mode, budget_p95_ms, best (None, or config, concurrency,
    max_batch_size, instance_group, throughput, p95_ms, p99_ms, satisfies_constraints,
    config_pbtxt), configs_measured, measurements, wall_s, smoke, settings, tools,
    all_measurements. Older files: no benchmark, load_average_1m beside machine rather than in
    it, command a list; before 2026-12-05 no revision or command, and settings the string
    "Model Analyzer's defaults". Empty when none was recorded."""
    results = []
    for mode in MODES:
        path = directory / f"model_analyzer-{model}-{mode}.json"
        if path.is_file():
            results.append(json.loads(path.read_text()))
    return results
