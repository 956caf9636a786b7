"""What each load client costs the server it measures, on tritonserver 2.51: perf_analyzer
2.51 and `autotune perf`, each over gRPC and HTTP, driving the same python model at the same
concurrency on one tritonserver.

On a machine where the client and the server share the cores, the client's CPU per request
is CPU the server does not get, so two clients can rank two configs differently
(docs/tuner.md, "Against Model Analyzer"). This counts it from outside the clients: the
requests by Triton's own statistics (`success` count of the model), the client's CPU by
psutil (user + system of its process and children, start-up included), the server's by
psutil (tritonserver and its python stubs). The clients take turns, round after round.

Run: python benchmarks/client_cost_on_triton.py [--model digits] [--concurrency 32]
     [--repeats 3] [--seconds 3]
Raw results: benchmarks/results/client_cost_on_triton.json (results_record's header, the
settings, every run: the client, its reported infer/s, Triton's count, the seconds, the
client's and the server's CPU seconds and per request; then per client the medians).
`--smoke` (1 round, 1 s windows) writes into a new temporary folder.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil
import tritonclient.http as httpclient
from peer import (
    AUTOTUNE_PERF,
    STABILITY_FLAGS,
    Server,
    cpu_seconds,
    install,
    success_count,
    triton,
)
from python_models import build_bundled, write_python_repository
from results_record import header, parse_with_smoke, write_record

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("digits", "resnet18", "simple")
CLIENTS = ("perf_analyzer grpc", "perf_analyzer http", "autotune perf grpc", "autotune perf http")
POLL_S = 0.05


@dataclass(frozen=True)
class ClientRun:
    client: str
    reported_infer_per_s: float  # the client's own figure (its CSV)
    requests: int  # Triton's success count over the client's whole run
    seconds: float
    client_cpu_s: float
    server_cpu_s: float

    def row(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "client_cpu_us_per_request": 1e6 * self.client_cpu_s / self.requests,
            "server_cpu_us_per_request": 1e6 * self.server_cpu_s / self.requests,
        }


def triton_success_count(server: Server, model: str) -> int:
    """Triton's success count for `model` so far."""
    client = httpclient.InferenceServerClient(server.urls["http"])
    try:
        return success_count(client.get_inference_statistics(model))
    finally:
        client.close()


def command(client: str, binary: Path, server: Server, model: str, concurrency: int) -> list[str]:
    tool, protocol = client.rsplit(" ", 1)
    prefix = [str(binary)] if tool == "perf_analyzer" else list(AUTOTUNE_PERF)
    return [
        *prefix,
        *("-m", model, "-u", server.urls[protocol], "-i", protocol),
        *("--concurrency-range", str(concurrency)),
    ]


def measure(
    client: str,
    binary: Path,
    server: Server,
    model: str,
    args: argparse.Namespace,
    scratch: Path,
) -> ClientRun:
    """One run of `client`, counted from outside it."""
    csv_path = scratch / f"{client.replace(' ', '-')}.csv"
    csv_path.unlink(missing_ok=True)
    argv = [
        *command(client, binary, server, model, args.concurrency),
        *("-p", str(int(args.seconds * 1000)), *STABILITY_FLAGS, "-f", str(csv_path)),
    ]
    served = psutil.Process(server.process.pid)
    count_before = triton_success_count(server, model)
    server_before = cpu_seconds(served, live_children=True)
    started = time.perf_counter()
    process = psutil.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    client_cpu = 0.0
    while process.poll() is None:
        try:
            client_cpu = max(client_cpu, cpu_seconds(process, live_children=True))
        except psutil.NoSuchProcess:
            break
        time.sleep(POLL_S)
    _, stderr = process.communicate()
    seconds = time.perf_counter() - started
    server_cpu = cpu_seconds(served, live_children=True) - server_before
    requests = triton_success_count(server, model) - count_before
    if process.returncode != 0 or not csv_path.is_file() or requests == 0:
        raise SystemExit(f"{client} failed ({process.returncode}): {stderr.decode()[-2000:]}")
    with csv_path.open(newline="") as handle:
        (row,) = list(csv.DictReader(handle))
    return ClientRun(
        client, float(row["Inferences/Second"]), requests, seconds, client_cpu, server_cpu
    )


def summary(runs: list[ClientRun]) -> dict[str, dict[str, float]]:
    """Per client, the medians of its runs' figures."""
    medians: dict[str, dict[str, float]] = {}
    for client in CLIENTS:
        rows = [run.row() for run in runs if run.client == client]
        if rows:
            medians[client] = {
                key: statistics.median(row[key] for row in rows)
                for key in (
                    "reported_infer_per_s",
                    "client_cpu_us_per_request",
                    "server_cpu_us_per_request",
                )
            }
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=MODELS, default="digits")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0, help="each measurement window")
    args = parse_with_smoke(parser, {"repeats": 1, "seconds": 1.0})
    weights = ROOT / "model_repository" / args.model / "1" / "model.onnx"
    if args.model != "simple" and not weights.is_file():
        build_bundled()
    wrapper = install("install_triton_peer.sh")
    binary = install("install_perf_analyzer.sh")
    runs: list[ClientRun] = []
    with tempfile.TemporaryDirectory(prefix="client-cost-") as scratch_name:
        scratch = Path(scratch_name)
        write_python_repository([args.model], scratch / "repository")
        with triton(wrapper, scratch / "repository", scratch / "tritonserver.log") as server:
            for index in range(args.repeats):
                for client in CLIENTS:
                    run = measure(client, binary, server, args.model, args, scratch)
                    runs.append(run)
                    row = run.row()
                    print(
                        f"round {index + 1} {client:<20} {run.reported_infer_per_s:9,.0f} "
                        f"infer/s  client {row['client_cpu_us_per_request']:6.1f} us/request  "
                        f"server {row['server_cpu_us_per_request']:6.1f} us/request",
                        flush=True,
                    )
    medians = summary(runs)
    for client, figures in medians.items():
        print(
            f"median {client:<20} {figures['reported_infer_per_s']:9,.0f} infer/s  client "
            f"{figures['client_cpu_us_per_request']:6.1f}  server "
            f"{figures['server_cpu_us_per_request']:6.1f} us/request"
        )
    record = {
        **header("client_cost_on_triton"),
        "settings": {
            "model": args.model,
            "concurrency": args.concurrency,
            "repeats": args.repeats,
            "window_s": args.seconds,
            "server": "tritonserver 2.51 (nvidia-pytriton 0.7.0)",
            "perf_analyzer": f"2.51, {' '.join(STABILITY_FLAGS)}",
        },
        "runs": [run.row() for run in runs],
        "medians": medians,
    }
    write_record("client_cost_on_triton", record, args.output)


if __name__ == "__main__":
    main()
