"""resnet18 (TorchScript) served on `KIND_GPU` instances against the same module run in-process
with torch on the same GPU: how much of the GPU's speed survives serving.

    python benchmarks/gpu_serving.py                          # KIND_GPU: needs CUDA (~5 min)
    python benchmarks/gpu_serving.py --workers 1 4 8 --concurrency 8 32 64
    python benchmarks/gpu_serving.py --kind KIND_CPU --smoke  # the whole path on a CPU machine

- The model: resnet18 (torchvision's where it is installed, else the same network from torch.nn;
  random weights; scripts/builders/torch_resnet.py) scripted, FP32 [3, 224, 224] in, [1000] out,
  `instance_group [{ count: --instances kind: --kind }]`, max_batch_size --max-batch-size,
  dynamic batching with --delay-us of queue delay.
- In-process, the ceiling: the scripted module on the same device, numpy in and numpy out as a
  server's backend gets and gives them, batch 1, 8 and max_batch_size, back to back for
  --in-process-s each; the best rate counts.
- Served: `autotune serve` of this checkout, one server per --workers count (front-end
  processes), every one started before the first measurement; measured by our analyzer
  (`autotune perf`'s engine, one image a request) over HTTP, gRPC and each with system shared
  memory (--modes), at each --concurrency, the servers and cells interleaved over --repeats
  rounds (cell by cell: w1, w4, w1, w4, ...). Per measurement: infer/s, p95, the GPU's
  utilisation as the server's metrics report it (`nv_gpu_utilization`, read while measuring,
  as `autotune perf --collect-metrics` does) and the server's cores busy (CPU seconds of its
  whole process tree over the measurement's wall time).

Prints every measurement, then per mode and server the median over the repeats at each
concurrency and the best concurrency's served / in-process, and issue 32's checks (at the best
concurrency: HTTP >= 0.8, system shared memory >= 0.9, more than 4 cores busy). It runs
without network access once its packages are installed (docs/gpu.md: `scripts/offline_wheels.sh`
for a machine that has none).

Raw results: benchmarks/results/gpu_serving.json (results_record's header, the settings, the
device, the in-process rates and every measurement); `--smoke` (2 s windows, one round, c8,
two modes, batch 1 and 8 in-process) writes into a new temporary folder, `--output` into the
one it names.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import torch
from peer import run_main
from results_record import header, parse_with_smoke, write_record
from usage import tree_cpu_s

from analyzer.api import AnalyzerError, LoadLevel, LoadOptions, MeasureSettings, measure
from common.serve_process import (
    GRPC_SERVICE,
    service_address,
    start_serve_process,
    stop_serve_process,
)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from builders.torch_resnet import resnet18  # noqa: E402  (scripts/ is not a package)

MODEL = "resnet18_pt"
MODES = {
    # mode: (protocol, shared memory)
    "http": ("http", "none"),
    "grpc": ("grpc", "none"),
    "http-shm": ("http", "system"),
    "grpc-shm": ("grpc", "system"),
}
# Issue 32's bar, at the best concurrency: served / in-process and the server's cores busy.
GOALS = {"http": 0.8, "http-shm": 0.9, "grpc-shm": 0.9}
CORES_GOAL = 4.0
CONFIG = """name: "{name}"
backend: "pytorch"
max_batch_size: {max_batch}
input [ {{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] }} ]
output [ {{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 1000 ] }} ]
instance_group [ {{ count: {instances} kind: {kind} }} ]
dynamic_batching {{ max_queue_delay_microseconds: {delay_us} }}
"""


@dataclass(frozen=True)
class Served:
    server: str  # e.g. "w1": one front-end process
    mode: str
    concurrency: int
    repeat: int
    infer_per_s: float
    p95_us: float
    stable: bool
    gpu_utilization: float | None  # 0-1, the mean over the GPUs the server reports
    server_cores_busy: float


@dataclass
class Server:
    name: str
    process: subprocess.Popen[bytes]
    urls: dict[str, str]  # protocol -> host:port
    metrics_url: str


def write_repository(root: Path, args: argparse.Namespace) -> str:
    """The model folder; returns where the network came from."""
    folder = root / MODEL
    (folder / "1").mkdir(parents=True)
    network, source = resnet18()
    torch.jit.script(network).save(str(folder / "1" / "model.pt"))
    (folder / "config.pbtxt").write_text(
        CONFIG.format(
            name=MODEL,
            max_batch=args.max_batch_size,
            instances=args.instances,
            kind=args.kind,
            delay_us=args.delay_us,
        )
    )
    return source


def device_name(kind: str) -> str:
    if kind == "KIND_GPU":
        if not torch.cuda.is_available():
            raise SystemExit(
                "KIND_GPU needs CUDA, and torch sees no GPU (--kind KIND_CPU runs here)"
            )
        return torch.cuda.get_device_name(0)
    return f"CPU ({psutil.cpu_count()} cores)"


def in_process(model_path: Path, kind: str, batches: list[int], seconds: float) -> dict[int, float]:
    """Images/s of the scripted module at each batch size, numpy in and numpy out."""
    device = "cuda:0" if kind == "KIND_GPU" else "cpu"
    module = torch.jit.load(str(model_path), map_location=device).eval()
    rates: dict[int, float] = {}
    for batch in batches:
        images = np.random.default_rng(0).standard_normal((batch, 3, 224, 224), dtype=np.float32)
        with torch.inference_mode():
            for _ in range(3):  # warm-up: cuDNN's algorithm choice, the JIT's profiling runs
                module(torch.from_numpy(images).to(device)).cpu().numpy()
            count, started = 0, time.perf_counter()
            while time.perf_counter() - started < seconds:
                module(torch.from_numpy(images).to(device)).cpu().numpy()
                count += batch
        rates[batch] = count / (time.perf_counter() - started)
        print(f"in-process batch {batch:>3}: {rates[batch]:10,.1f} infer/s", flush=True)
    return rates


def start(repository: Path, log: Path, workers: int) -> Server:
    process, http = start_serve_process(repository, log, ("--workers", str(workers)))
    try:
        grpc = service_address(log, process, GRPC_SERVICE)
        metrics = service_address(log, process, "Metrics Service")
    except Exception:
        stop_serve_process(process)
        raise
    return Server(f"w{workers}", process, {"http": http, "grpc": grpc}, f"{metrics}/metrics")


def measure_served(
    server: Server,
    mode: str,
    concurrency: int,
    repeat: int,
    settings: MeasureSettings,
    on_gpu: bool,
) -> Served | None:
    """One measurement; the GPU's utilisation read from the server's metrics when `on_gpu`."""
    protocol, shared_memory = MODES[mode]
    options = LoadOptions(
        url=server.urls[protocol],
        model=MODEL,
        protocol=protocol,
        shared_memory=shared_memory,
        output_shared_memory_size=1000 * 4,
        metrics_url=server.metrics_url if on_gpu else None,
    )
    cpu_before, wall_before = tree_cpu_s(server.process.pid), time.perf_counter()
    try:
        result = measure(options, LoadLevel(concurrency=concurrency), settings)
    except AnalyzerError as exc:
        print(f"{server.name} {mode} c{concurrency} #{repeat}: failed: {exc}", flush=True)
        return None
    cores = (tree_cpu_s(server.process.pid) - cpu_before) / (time.perf_counter() - wall_before)
    utilization = None
    if result.gpu is not None and result.gpu.utilization:
        utilization = statistics.mean(result.gpu.utilization.values())
    served = Served(
        server.name,
        mode,
        concurrency,
        repeat,
        result.throughput,
        result.latency_p95_us,
        result.stable,
        utilization,
        cores,
    )
    busy = "-" if utilization is None else f"{utilization:.0%}"
    print(
        f"{server.name} {mode:>8} c{concurrency:<3} #{repeat}: {served.infer_per_s:9,.1f} "
        f"infer/s  p95 {served.p95_us / 1000:7.2f} ms  GPU {busy:>4}  "
        f"server cores {cores:5.2f}{'' if served.stable else '  (not stable)'}",
        flush=True,
    )
    return served


def summarize(runs: list[Served], ceiling: float) -> dict[str, Any]:
    """Per mode and server: the medians at each concurrency, the best concurrency's ratio to
    the in-process ceiling, and the goals' checks on the best server."""
    print()
    print(f"in-process ceiling {ceiling:,.1f} infer/s; medians over the rounds")
    best: dict[str, dict[str, Any]] = {}
    for mode in dict.fromkeys(r.mode for r in runs):
        for server in dict.fromkeys(r.server for r in runs):
            cell = [r for r in runs if r.mode == mode and r.server == server]
            for concurrency in sorted({r.concurrency for r in cell}):
                level = [r for r in cell if r.concurrency == concurrency]
                rate = statistics.median(r.infer_per_s for r in level)
                cores = statistics.median(r.server_cores_busy for r in level)
                gpu = [r.gpu_utilization for r in level if r.gpu_utilization is not None]
                figures: dict[str, Any] = {
                    "server": server,
                    "concurrency": concurrency,
                    "infer_per_s": rate,
                    "range": [min(r.infer_per_s for r in level), max(r.infer_per_s for r in level)],
                    "p95_ms": statistics.median(r.p95_us for r in level) / 1000,
                    "gpu_utilization": statistics.median(gpu) if gpu else None,
                    "server_cores_busy": cores,
                    "served_over_in_process": rate / ceiling,
                }
                shown_gpu = "-" if not gpu else f"{statistics.median(gpu):.0%}"
                print(
                    f"{mode:>8} {server} c{concurrency:<3} {rate:9,.1f} infer/s "
                    f"[{figures['range'][0]:,.1f}-{figures['range'][1]:,.1f}]  "
                    f"served/in-process {rate / ceiling:.2f}  GPU {shown_gpu}  cores {cores:.2f}"
                )
                if mode not in best or rate > best[mode]["infer_per_s"]:
                    best[mode] = figures
    checks: dict[str, bool] = {}
    for mode, figures in best.items():
        goal = GOALS.get(mode)
        if goal is not None:
            checks[f"{mode} served / in-process >= {goal}"] = (
                figures["served_over_in_process"] >= goal
            )
    if best:
        busiest = max(f["server_cores_busy"] for f in best.values())
        checks[f"server busy on more than {CORES_GOAL:g} cores"] = busiest > CORES_GOAL
    print()
    for mode, figures in best.items():
        print(
            f"best {mode}: {figures['server']} c{figures['concurrency']} "
            f"{figures['served_over_in_process']:.2f} of in-process"
        )
    for check, held in checks.items():
        print(f"{'holds' if held else 'NOT MET'}: {check}")
    return {"best": best, "checks": checks}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=("KIND_GPU", "KIND_CPU"), default="KIND_GPU")
    parser.add_argument("--instances", type=int, default=2)
    parser.add_argument("--max-batch-size", type=int, default=32)
    parser.add_argument("--delay-us", type=int, default=1000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    parser.add_argument("--concurrency", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--window-ms", type=int, default=2000)
    parser.add_argument("--in-process-s", type=float, default=3.0)
    parser.add_argument("--in-process-batches", type=int, nargs="+", default=None)
    args = parse_with_smoke(
        parser,
        {
            "concurrency": [8],
            "repeats": 1,
            "window_ms": 2000,
            "modes": ["http", "grpc-shm"],
            "workers": [1],
            "in_process_s": 1.0,
            "in_process_batches": [1, 8],
        },
    )
    batches = args.in_process_batches or sorted({1, 8, args.max_batch_size})
    device = device_name(args.kind)
    print(f"device: {device}; torch {torch.__version__}", flush=True)
    settings = MeasureSettings(measurement_interval_ms=args.window_ms, max_trials=6)
    on_gpu = args.kind == "KIND_GPU"
    runs: list[Served] = []
    with tempfile.TemporaryDirectory() as scratch_name, ExitStack() as stack:
        scratch = Path(scratch_name)
        source = write_repository(scratch / "repository", args)
        print(f"model: resnet18 from {source}, scripted", flush=True)
        rates = in_process(
            scratch / "repository" / MODEL / "1" / "model.pt", args.kind, batches, args.in_process_s
        )
        servers: list[Server] = []
        for count in args.workers:
            server = start(scratch / "repository", scratch / f"w{count}.log", count)
            stack.callback(stop_serve_process, server.process)
            servers.append(server)
        for mode in args.modes:
            for concurrency in args.concurrency:
                for repeat in range(1, args.repeats + 1):
                    for server in servers:
                        run = measure_served(server, mode, concurrency, repeat, settings, on_gpu)
                        if run is not None:
                            runs.append(run)
    ceiling = max(rates.values())
    summary = summarize(runs, ceiling)
    record = {
        **header("gpu_serving"),
        "settings": {
            key: getattr(args, key)
            for key in (
                "kind",
                "instances",
                "max_batch_size",
                "delay_us",
                "workers",
                "modes",
                "concurrency",
                "repeats",
                "window_ms",
                "in_process_s",
            )
        },
        "device": device,
        "torch": torch.__version__,
        "network": source,
        "in_process_infer_per_s": {str(batch): rate for batch, rate in rates.items()},
        "runs": [asdict(run) for run in runs],
        **summary,
    }
    write_record(
        "gpu_serving" if args.kind == "KIND_GPU" else "gpu_serving-cpu", record, args.output
    )


if __name__ == "__main__":
    run_main(main)
