"""How much of the runtime's own speed survives serving over HTTP with dynamic batching.

For `resnet18` and `digits` it measures, in one run on this machine:
  1. in-process onnxruntime throughput at the best of several batch sizes (same session options
     as the model's config.pbtxt), and
  2. the throughput `autotune serve` delivers over HTTP (binary tensors, keep-alive
     connections, one-row requests as clients send them) with the model's dynamic batching,
     at a concurrency that keeps the server busy, measured by `autotune perf`'s engine,
and prints both with their ratio. Run: python benchmarks/serving_efficiency.py [--seconds 10]

Raw results: benchmarks/results/serving_efficiency.json (results_record's header, the settings,
per model every in-process batch size's rate, the served rate, the ratio and the server's CPU);
`--smoke` (1 s a figure) writes into a new temporary folder, `--output` into the one it names.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import onnxruntime as ort
import psutil
from in_process import InProcess
from results_record import header, parse_with_smoke, write_record

from analyzer.api import LoadLevel, LoadOptions, MeasureSettings, measure
from common.serve_process import start_serve_process, stop_serve_process

ROOT = Path(__file__).resolve().parents[1]
REPOSITORY = ROOT / "model_repository"

MODELS = {
    # model: (input name, item shape, batch sizes to try in-process, client concurrency)
    "resnet18": ("input", (3, 224, 224), (1, 4, 8, 16), 16),
    "digits": ("input", (1, 8, 8), (1, 16, 64), 32),
}


def in_process_throughput(model: str, seconds: float) -> dict[int, float]:
    """Inferences/s at each batch size."""
    _, _, sizes, _ = MODELS[model]
    runtime = InProcess(model, REPOSITORY)
    rates = {}
    for size in sizes:
        rates[size] = runtime.rate(size, seconds / len(sizes))
        print(f"  in-process {model} batch {size:>3}: {rates[size]:10.1f} infer/s")
    return rates


def best_batch(rates: dict[int, float]) -> tuple[float, int]:
    """The best inferences/s over the batch sizes, and the batch size that gave it."""
    return max((rate, size) for size, rate in rates.items())


def start_server(repository: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    process, address = start_serve_process(repository, log, timeout_s=120)
    return process, f"http://{address}"


def served_throughput(url: str, model: str, seconds: float) -> float:
    """Inferences/s measured by the analyzer (perf_analyzer's method, binary tensors)."""
    _, _, _, concurrency = MODELS[model]
    measurement = measure(
        LoadOptions(url=url, model=model),
        LoadLevel(concurrency=concurrency),
        MeasureSettings(
            measurement_interval_ms=int(seconds * 1000 / 3),
            stability_percentage=20,
            max_trials=12,
            warmup_request_count=100,
        ),
    )
    return measurement.throughput


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="measurement per figure")
    args = parse_with_smoke(parser, {"seconds": 1.0})
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "build_model_repository.py"),
            "--repository",
            str(REPOSITORY),
        ],
        check=True,
    )
    print(f"machine: {os.cpu_count()} cores; onnxruntime {ort.__version__}")
    in_process = {m: in_process_throughput(m, args.seconds) for m in MODELS}
    with tempfile.TemporaryDirectory() as scratch:
        process, base = start_server(REPOSITORY, Path(scratch) / "server.log")
        try:
            served = {}
            server_cpu = {}
            server = psutil.Process(process.pid)
            for model in MODELS:
                before, started = server.cpu_times(), time.perf_counter()
                served[model] = served_throughput(base.removeprefix("http://"), model, args.seconds)
                after, elapsed = server.cpu_times(), time.perf_counter() - started
                used = (after.user + after.system) - (before.user + before.system)
                server_cpu[model] = used / elapsed
        finally:
            stop_serve_process(process, timeout_s=60)
    print()
    print(
        f"{'model':<10} {'in-process (best batch)':>26} {'served over HTTP':>18} {'ratio':>7}"
        f" {'server CPU':>11}"
    )
    figures = {}
    for model in MODELS:
        rate, size = best_batch(in_process[model])
        print(
            f"{model:<10} {rate:>17.1f} (b={size:<3}) {served[model]:>18.1f} "
            f"{served[model] / rate:>7.2f} {server_cpu[model] * 100:>10.0f}%"
        )
        figures[model] = {
            "in_process_infer_per_s": {str(batch): r for batch, r in in_process[model].items()},
            "best_batch": size,
            "served_infer_per_s": served[model],
            "ratio": served[model] / rate,
            "server_cpu_cores": server_cpu[model],
        }
    print("(server CPU: cores the server process used while serving; 100% = one core)")
    settings = {
        model: {"batch_sizes": sizes, "concurrency": concurrency}
        for model, (_, _, sizes, concurrency) in MODELS.items()
    }
    record = {
        **header("serving_efficiency"),
        "settings": {"seconds": args.seconds, "onnxruntime": ort.__version__, "models": settings},
        "models": figures,
    }
    write_record("serving_efficiency", record, args.output)


if __name__ == "__main__":
    main()
