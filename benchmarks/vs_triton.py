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
import csv
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.utils import InferenceServerException

from common.serve_process import (
    ServeProcessError,
    die_with_parent,
    log_tail,
    start_serve_process,
    stop_serve_process,
)

ROOT = Path(__file__).resolve().parents[1]
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
START_TIMEOUT_S = 120.0
# Our server starts gRPC right after HTTP; no line within this time means it has no gRPC endpoint.
GRPC_LINE_WAIT_S = 10.0
UNSTABLE = "Failed to obtain stable measurement"

# The python-backend form of `simple`, for Triton (and for ours with --ours-backend python).
PYTHON_MODEL = '''"""simple: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1"""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            in0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            in1 = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            outputs = [pb_utils.Tensor("OUTPUT0", in0 + in1), pb_utils.Tensor("OUTPUT1", in0 - in1)]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
'''


@dataclass(frozen=True)
class Server:
    name: str
    process: subprocess.Popen[bytes]
    log: Path
    urls: dict[str, str]  # protocol -> host:port; no "grpc" key when it has no gRPC endpoint


@dataclass(frozen=True)
class Run:
    server: str
    mode: str
    concurrency: int
    infer_per_s: float
    p95_us: int


def install(script: str) -> Path:
    """Run an idempotent install script of ours; it prints the installed binary's path last."""
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / script)], capture_output=True, text=True, timeout=900
    )
    if result.returncode != 0:
        sys.exit(f"scripts/{script} failed ({result.returncode}):\n{result.stderr}")
    return Path(result.stdout.strip().splitlines()[-1])


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def python_model(source: Path, destination: Path) -> None:
    """`source`'s config with the python backend, and PYTHON_MODEL, as a model folder."""
    config = text_format.Parse((source / "config.pbtxt").read_text(), mc.ModelConfig())
    config.ClearField("platform")
    config.backend = "python"
    (destination / "1").mkdir(parents=True)
    (destination / "config.pbtxt").write_text(text_format.MessageToString(config))
    (destination / "1" / "model.py").write_text(PYTHON_MODEL)


def wait_for_lines(
    process: subprocess.Popen[bytes], log: Path, names: Sequence[str]
) -> dict[str, str]:
    """host:port of each `Started <name> at host:port` line of the log, once all are there."""
    patterns = {name: re.compile(rf"Started {name} at ([0-9.]+):(\d+)") for name in names}
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        found = {name: pattern.search(text) for name, pattern in patterns.items()}
        if all(found.values()):
            return {name: f"{m.group(1)}:{m.group(2)}" for name, m in found.items() if m}
        if process.poll() is not None:
            break
        time.sleep(0.1)
    raise ServeProcessError(f"no {' and '.join(names)} line in {log}:\n{log_tail(log)}")


@contextmanager
def triton(wrapper: Path, repository: Path, log: Path) -> Iterator[Server]:
    http_port, grpc_port, metrics_port = free_port(), free_port(), free_port()
    command = [
        str(wrapper),
        *("--model-repository", str(repository)),
        *("--http-address", "127.0.0.1", "--http-port", str(http_port)),
        *("--grpc-address", "127.0.0.1", "--grpc-port", str(grpc_port)),
        *("--metrics-address", "127.0.0.1", "--metrics-port", str(metrics_port)),
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, preexec_fn=die_with_parent
        )
    try:
        lines = wait_for_lines(process, log, ["HTTPService", "GRPCInferenceService"])
        urls = {"http": lines["HTTPService"], "grpc": lines["GRPCInferenceService"]}
        yield Server("triton", process, log, urls)
    finally:
        stop_serve_process(process)


@contextmanager
def ours(repository: Path, log: Path, extra: Sequence[str]) -> Iterator[Server]:
    process, http_url = start_serve_process(repository, log, extra, timeout_s=START_TIMEOUT_S)
    try:
        urls = {"http": http_url}
        pattern = re.compile(r"Started GRPCInferenceService at ([0-9.]+):(\d+)")
        deadline = time.monotonic() + GRPC_LINE_WAIT_S
        while time.monotonic() < deadline and process.poll() is None:
            match = pattern.search(log.read_text(errors="replace"))
            if match:
                urls["grpc"] = f"{match.group(1)}:{match.group(2)}"
                break
            time.sleep(0.1)
        yield Server("ours", process, log, urls)
    finally:
        stop_serve_process(process)


def check_outputs(server: Server, protocol: str) -> None:
    """One request of random INT32 rows through tritonclient; every output must match numpy."""
    client_module = grpcclient if protocol == "grpc" else httpclient
    rng = np.random.default_rng(0)
    in0, in1 = (rng.integers(-1000, 1000, (1, 16), dtype=np.int32) for _ in range(2))
    inputs = []
    for name, value in (("INPUT0", in0), ("INPUT1", in1)):
        tensor = client_module.InferInput(name, list(value.shape), "INT32")
        tensor.set_data_from_numpy(value)
        inputs.append(tensor)
    client = client_module.InferenceServerClient(server.urls[protocol])
    try:
        result = client.infer(MODEL, inputs)
    except InferenceServerException as exc:
        raise SystemExit(
            f"{server.name} over {protocol}: infer failed: {exc}\n{log_tail(server.log)}"
        ) from exc
    finally:
        client.close()
    for name, expected in (("OUTPUT0", in0 + in1), ("OUTPUT1", in0 - in1)):
        got = result.as_numpy(name)
        if got is None or got.shape != expected.shape or not np.array_equal(got, expected):
            raise SystemExit(
                f"{server.name} over {protocol}: {name} is {got!r}, expected {expected!r}"
                f"\n{log_tail(server.log)}"
            )


def perf_analyzer(
    binary: Path, server: Server, mode: str, concurrency: int, window_ms: int, scratch: Path
) -> Run | None:
    """One perf_analyzer measurement; None when it found no stable windows (a busy machine)."""
    protocol, flags = MODES[mode]
    csv_path = scratch / f"{server.name}-{mode}-c{concurrency}.csv"
    command = [
        str(binary),
        *("-m", MODEL, "-u", server.urls[protocol], "-i", protocol, *flags),
        *("--concurrency-range", str(concurrency), "-p", str(window_ms)),
        # A shared 2-core machine: looser stability than the default 10%, more windows.
        *("-s", "20", "-r", "15"),
        *("-f", str(csv_path)),
    ]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=600, preexec_fn=die_with_parent
    )
    if result.returncode != 0 and UNSTABLE in result.stdout + result.stderr:
        return None
    # An interrupted perf_analyzer exits 0 without writing its CSV.
    if result.returncode != 0 or not csv_path.is_file():
        raise SystemExit(
            f"perf_analyzer failed ({result.returncode}): {' '.join(command)}\n"
            f"{result.stdout[-3000:]}\n{result.stderr[-2000:]}"
        )
    with csv_path.open(newline="") as handle:
        (row,) = list(csv.DictReader(handle))
    return Run(
        server.name, mode, concurrency, float(row["Inferences/Second"]), int(row["p95 latency"])
    )


def describe(runs: list[Run]) -> str:
    rates = [run.infer_per_s for run in runs]
    p95 = statistics.median(run.p95_us for run in runs) / 1000
    return (
        f"{statistics.median(rates):>8,.0f} [{min(rates):>6,.0f}-{max(rates):>6,.0f}]"
        f" p95 {p95:5.2f} ms n={len(runs)}"
    )


def summary(runs: list[Run], modes: Sequence[str], concurrencies: Sequence[int]) -> None:
    print()
    print("median infer/s [range] and median p95, per mode and concurrency")
    print(f"{'':<18} {'ours':>40} {'triton':>40} {'ours/triton':>12}")
    for mode in modes:
        for concurrency in concurrencies:
            cell = [r for r in runs if r.mode == mode and r.concurrency == concurrency]
            mine = [r for r in cell if r.server == "ours"]
            theirs = [r for r in cell if r.server == "triton"]
            label = f"{mode} c{concurrency}"
            left = describe(mine) if mine else "(not measured)"
            right = describe(theirs) if theirs else "(not measured)"
            ratio = "-"
            if mine and theirs:
                ours_median = statistics.median(r.infer_per_s for r in mine)
                ratio = f"{ours_median / statistics.median(r.infer_per_s for r in theirs):.2f}"
            print(f"{label:<18} {left:>40} {right:>40} {ratio:>12}")


def revision() -> str:
    result = subprocess.run(
        ["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True
    )
    return result.stdout.strip() or "unknown"


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
        if args.ours_backend == "python":
            python_model(source, ours_repository / MODEL)
        else:
            shutil.copytree(source, ours_repository / MODEL)
        python_model(source, peer_repository / MODEL)

        servers = [
            stack.enter_context(ours(ours_repository, scratch / "ours.log", args.ours_flag)),
            stack.enter_context(triton(wrapper, peer_repository, scratch / "triton.log")),
        ]
        protocols = sorted({MODES[mode][0] for mode in args.modes})
        for server in servers:
            for protocol in protocols:
                if protocol in server.urls:
                    check_outputs(server, protocol)
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
                        run = None
                        for _ in range(args.attempts):
                            run = perf_analyzer(
                                binary, server, mode, concurrency, args.window_ms, scratch
                            )
                            if run is not None:
                                break
                            print(f"{label} no stable windows; measuring again", flush=True)
                        if run is None:
                            print(f"{label} skipped: no stable windows", flush=True)
                            continue
                        runs.append(run)
                        print(
                            f"{label} {run.infer_per_s:>9,.0f} infer/s"
                            f"  p95 {run.p95_us / 1000:5.2f} ms",
                            flush=True,
                        )
    summary(runs, args.modes, args.concurrency)
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


def stop_on_signal(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    # Ctrl-C and SIGTERM unwind main(), which stops both servers; SIGINT also when the shell
    # started this script with it ignored (a background job).
    signal.signal(signal.SIGINT, stop_on_signal)
    signal.signal(signal.SIGTERM, stop_on_signal)
    try:
        main()
    except KeyboardInterrupt:
        sys.exit("interrupted: both servers stopped")
