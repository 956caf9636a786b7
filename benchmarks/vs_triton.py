"""Our server against NVIDIA Triton Inference Server 2.51 on this machine: same model, same load.

The model is `simple` (INT32 add/sub, 16 elements, max_batch_size 8, dynamic batching, one CPU
instance). Ours serves the bundled one (onnxruntime backend; `--ours-backend python` serves the
same model.py as Triton instead). Triton's onnxruntime backend is not in the PyPI wheel it is
installed from, so Triton serves `simple` as a python model: the same config.pbtxt with
`backend: "python"` and a model.py computing the same outputs, written into a temporary
repository.

Both servers start once, on free 127.0.0.1 ports, and are checked with tritonclient (every
output equal to numpy's) before anything is measured. Then NVIDIA's perf_analyzer measures each
mode (`--modes`: HTTP, gRPC, gRPC streaming, system shared memory over either) and concurrency
with the two servers interleaved (ours, Triton, ours, Triton, ...),
`--repeats` times each, `--window-ms` measurement windows, and the script prints every run's
infer/s and p95 latency, then per mode and concurrency the median and range of each server
and the ratio ours/Triton of the medians. A run whose windows never stabilise (a busy machine)
is measured again, up to `--attempts` times, then left out: `n` says how many runs a median holds.
Both servers are stopped at the end, on Ctrl-C too.

Installs on first use: scripts/install_perf_analyzer.sh and scripts/install_triton_peer.sh
(both under .cache/). Run: python benchmarks/vs_triton.py [--repeats 3] [--window-ms 4000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from contextlib import ExitStack
from pathlib import Path

import numpy as np
from google.protobuf import text_format
from peer import (
    ROOT,
    SIMPLE_MODEL,
    Run,
    check_outputs,
    install,
    measure,
    ours,
    python_model,
    revision,
    run_main,
    summary,
    triton,
)
from tritonclient.grpc import model_config_pb2 as mc

MODEL = "simple"
PROTOCOLS = ("grpc", "http")
# mode -> (protocol, perf_analyzer flags): how the requests travel
MODES: dict[str, tuple[str, tuple[str, ...]]] = {
    "grpc": ("grpc", ()),
    "http": ("http", ()),
    "grpc-streaming": ("grpc", ("--streaming",)),
    "grpc-shm": ("grpc", ("--shared-memory", "system")),
    "http-shm": ("http", ("--shared-memory", "system")),
}


def simple_check() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Random INT32 rows for `simple` and the outputs numpy computes for them."""
    rng = np.random.default_rng(0)
    in0, in1 = (rng.integers(-1000, 1000, (1, 16), dtype=np.int32) for _ in range(2))
    return {"INPUT0": in0, "INPUT1": in1}, {"OUTPUT0": in0 + in1, "OUTPUT1": in0 - in1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs per server and cell")
    parser.add_argument("--window-ms", type=int, default=4000, help="perf_analyzer's -p")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    parser.add_argument(
        "--attempts", type=int, default=3, help="tries per run when windows are not stable"
    )
    parser.add_argument(
        "--modes",
        nargs="+",
        choices=MODES,
        default=list(PROTOCOLS),
        help="how requests travel: plain gRPC / HTTP, gRPC streaming, system shared memory",
    )
    parser.add_argument(
        "--ours-backend",
        choices=("onnxruntime", "python"),
        default="onnxruntime",
        help="our `simple` as bundled (onnxruntime) or as the same python model as Triton's",
    )
    parser.add_argument(
        "--ours-flag",
        action="append",
        default=[],
        metavar="FLAG",
        help="a flag for our server, e.g. --ours-flag=--grpc-front-end=grpcio (repeatable)",
    )
    args = parser.parse_args()

    binary = install("install_perf_analyzer.sh")
    wrapper = install("install_triton_peer.sh")
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    flags = " ".join(args.ours_flag) or "no extra flags"
    print(
        f"ours: {revision()}, `simple` on {args.ours_backend}, {flags}; triton 2.51: python backend"
    )
    runs: list[Run] = []
    with tempfile.TemporaryDirectory() as scratch_name, ExitStack() as stack:
        scratch = Path(scratch_name)
        ours_repository, peer_repository = scratch / "ours", scratch / "triton"
        source = ROOT / "model_repository" / MODEL
        config = text_format.Parse((source / "config.pbtxt").read_text(), mc.ModelConfig())
        if args.ours_backend == "python":
            python_model(config, SIMPLE_MODEL, ours_repository / MODEL)
        else:
            shutil.copytree(source, ours_repository / MODEL)
        python_model(config, SIMPLE_MODEL, peer_repository / MODEL)

        servers = [
            stack.enter_context(ours(ours_repository, scratch / "ours.log", args.ours_flag)),
            stack.enter_context(triton(wrapper, peer_repository, scratch / "triton.log")),
        ]
        protocols = sorted({MODES[mode][0] for mode in args.modes})
        inputs, expected = simple_check()
        for server in servers:
            for protocol in protocols:
                if protocol in server.urls:
                    check_outputs(server, protocol, MODEL, inputs, expected)
            print(f"{server.name}: {server.urls} (outputs checked)")
        if "grpc" in protocols and "grpc" not in servers[0].urls:
            print("ours has no gRPC endpoint yet: only Triton's gRPC rows are measured")

        for mode in args.modes:
            for concurrency in args.concurrency:
                for repeat in range(1, args.repeats + 1):
                    for server in servers:
                        if MODES[mode][0] not in server.urls:
                            continue
                        label = f"{mode} c{concurrency} #{repeat} {server.name:<6}"
                        protocol, mode_flags = MODES[mode]
                        run = measure(
                            args.attempts,
                            label,
                            binary,
                            server,
                            MODEL,
                            protocol,
                            concurrency,
                            args.window_ms,
                            scratch,
                            mode,
                            mode_flags,
                        )
                        if run is not None:
                            runs.append(run)
    summary(runs, args.modes, args.concurrency)
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    run_main(main)
