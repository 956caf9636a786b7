"""What the benchmarks against NVIDIA Triton 2.51 share: installing perf_analyzer and the Triton
peer, starting and stopping both servers on free 127.0.0.1 ports, python-backend model folders,
checking outputs with tritonclient, one perf_analyzer run, and the median/range summary."""

from __future__ import annotations

import contextlib
import csv
import http.client
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from common.serve_process import (
    ServeProcessError,
    log_tail,
    start_serve_process,
    stop_serve_process,
)
from common.tied_child import tied_command

ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 120.0
# Our server starts gRPC right after HTTP; no line within this time means it has no gRPC endpoint.
GRPC_LINE_WAIT_S = 10.0
# A run without a figure, in perf_analyzer's words and then in `autotune perf`'s: no stable
# windows, or a window without a completed request (a slow model on a busy machine).
NO_FIGURE = (
    "Failed to obtain stable measurement",
    "No valid requests recorded within time interval",
    "could not obtain a stable measurement",
    "no request completed successfully within a measurement window",
)
# `autotune perf` of this checkout: the same flags and CSV as perf_analyzer's.
AUTOTUNE_PERF = (sys.executable, "-m", "tuner", "perf")
# tritonserver waits up to 30 s for requests in flight before it exits.
GROUP_STOP_GRACE_S = 40.0


@dataclass(frozen=True)
class Server:
    name: str
    process: subprocess.Popen[bytes]
    log: Path
    urls: dict[str, str]  # protocol -> host:port; no "grpc" key when it has no gRPC endpoint


@dataclass(frozen=True)
class Run:
    server: str
    cell: str  # what was measured besides concurrency, e.g. a mode or "model protocol"
    concurrency: int
    infer_per_s: float
    p95_us: int


# perf_analyzer's stability: 20% between windows, at most 15 windows.
STABILITY_FLAGS = ("-s", "20", "-r", "15")


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


def python_model(config: mc.ModelConfig, source: str, destination: Path) -> None:
    """A model folder: `config` on the python backend, and `source` as version 1's model.py."""
    config = mc.ModelConfig.FromString(config.SerializeToString())
    config.ClearField("platform")
    config.backend = "python"
    (destination / "1").mkdir(parents=True)
    (destination / "config.pbtxt").write_text(text_format.MessageToString(config))
    (destination / "1" / "model.py").write_text(source)


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


def triton_command(wrapper: Path, repository: Path, http_port: int) -> list[str]:
    """tritonserver on `repository`, HTTP on 127.0.0.1:`http_port`, gRPC and metrics on other
    free 127.0.0.1 ports."""
    grpc_port, metrics_port = free_port(), free_port()
    return [
        str(wrapper),
        *("--model-repository", str(repository)),
        *("--http-address", "127.0.0.1", "--http-port", str(http_port)),
        *("--grpc-address", "127.0.0.1", "--grpc-port", str(grpc_port)),
        *("--metrics-address", "127.0.0.1", "--metrics-port", str(metrics_port)),
    ]


def http_ready(address: str) -> bool:
    """Whether GET /v2/health/ready at host:port answers 200 (False while refused)."""
    host, port = address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=1.0)
    try:
        connection.request("GET", "/v2/health/ready")
        return connection.getresponse().status == 200
    except OSError:
        return False
    finally:
        connection.close()


def wait_until_ready(
    process: subprocess.Popen[bytes],
    address: str,
    log: Path,
    timeout_s: float = START_TIMEOUT_S,
    poll_s: float = 0.05,
) -> None:
    """Poll /v2/health/ready at `address` until 200; SystemExit when the process ends first or
    `timeout_s` passes."""
    deadline = time.monotonic() + timeout_s
    while not http_ready(address):
        if process.poll() is not None:
            raise SystemExit(f"{process.args!r} exited before ready:\n{log_tail(log)}")
        if time.monotonic() > deadline:
            raise SystemExit(f"not ready in {timeout_s:.0f} s:\n{log_tail(log)}")
        time.sleep(poll_s)


def pinned(cpus: str | None) -> tuple[str, ...]:
    """The prefix that runs a command on the CPUs `cpus` (taskset's list); none for None."""
    return () if cpus is None else ("taskset", "-c", cpus)


def success_count(response: Mapping[str, Any]) -> int:
    """The first model's success count in a KServe v2 statistics response (/v2/models/X/stats)."""
    return int(response["model_stats"][0]["inference_stats"]["success"]["count"])


@contextmanager
def triton(
    wrapper: Path,
    repository: Path,
    log: Path,
    extra: Sequence[str] = (),
    cpus: str | None = None,
) -> Iterator[Server]:
    """Triton 2.51 (the wrapper install_triton_peer.sh prints) on `repository`, with Triton's
    own flags `extra` (e.g. --model-control-mode explicit), on the CPUs `cpus` (taskset's
    list, e.g. "1-3"; its python stubs inherit them) when given; stopped on exit."""
    command = [*pinned(cpus), *triton_command(wrapper, repository, free_port()), *extra]
    with log.open("wb") as out:
        process = subprocess.Popen(tied_command(command), stdout=out, stderr=subprocess.STDOUT)
    try:
        lines = wait_for_lines(process, log, ["HTTPService", "GRPCInferenceService"])
        urls = {"http": lines["HTTPService"], "grpc": lines["GRPCInferenceService"]}
        # Its "Started" lines can come a moment before the HTTP port accepts connections.
        wait_until_ready(process, urls["http"], log)
        yield Server("triton", process, log, urls)
    finally:
        stop_serve_process(process)


@contextmanager
def ours(
    repository: Path,
    log: Path,
    extra: Sequence[str] = (),
    name: str = "ours",
    code: Path | None = None,
) -> Iterator[Server]:
    """Our server on `repository` with `extra` flags, called `name` in the results (`code`: the
    server of that source tree, e.g. a worktree of another revision); stopped on exit."""
    process, http_url = start_serve_process(
        repository, log, extra, timeout_s=START_TIMEOUT_S, code=code
    )
    try:
        wait_until_ready(process, http_url, log)
        urls = {"http": http_url}
        pattern = re.compile(r"Started GRPCInferenceService at ([0-9.]+):(\d+)")
        deadline = time.monotonic() + GRPC_LINE_WAIT_S
        while time.monotonic() < deadline and process.poll() is None:
            match = pattern.search(log.read_text(errors="replace"))
            if match:
                urls["grpc"] = f"{match.group(1)}:{match.group(2)}"
                break
            time.sleep(0.1)
        yield Server(name, process, log, urls)
    finally:
        stop_serve_process(process)


def stop_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to what is left of the process group `process` leads (a tool started with
    start_new_session=True, e.g. Model Analyzer or the tuner, and the servers and clients it
    started), SIGKILL after a grace period (tritonserver waits up to 30 s for requests in
    flight)."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:  # the group ended with its leader
        process.wait()
        return
    deadline = time.monotonic() + GROUP_STOP_GRACE_S
    while time.monotonic() < deadline:
        process.poll()  # reaped, the leader itself no longer counts as a member
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def check_outputs(
    server: Server,
    protocol: str,
    model: str,
    inputs: Mapping[str, np.ndarray],
    expected: Mapping[str, np.ndarray],
    tolerance: float = 0.0,
) -> None:
    """One request through tritonclient; every expected output must come back equal, or
    within `tolerance` (absolute and relative) for floating-point models (a peer that sends
    empty outputs fails here, not silently in perf_analyzer)."""
    client_module = grpcclient if protocol == "grpc" else httpclient
    tensors = []
    for name, value in inputs.items():
        tensor = client_module.InferInput(name, list(value.shape), np_to_triton_dtype(value.dtype))
        tensor.set_data_from_numpy(value)
        tensors.append(tensor)
    client = client_module.InferenceServerClient(server.urls[protocol])
    try:
        result = client.infer(model, tensors)
    except InferenceServerException as exc:
        raise SystemExit(
            f"{server.name} over {protocol}: {model}: infer failed: {exc}\n{log_tail(server.log)}"
        ) from exc
    finally:
        client.close()
    for name, want in expected.items():
        got = result.as_numpy(name)
        if (
            got is None
            or got.shape != want.shape
            or not np.allclose(got, want, rtol=tolerance, atol=tolerance)
        ):
            raise SystemExit(
                f"{server.name} over {protocol}: {model}: {name} is {got!r}, expected {want!r}"
                f"\n{log_tail(server.log)}"
            )


def perf_analyzer(
    binary: Path | Sequence[str],
    server: Server,
    model: str,
    protocol: str,
    concurrency: int,
    window_ms: int,
    scratch: Path,
    cell: str,
    flags: Sequence[str] = (),
) -> Run | None:
    """One perf_analyzer measurement (or one by another client of the same flags and CSV,
    `binary` then its command, e.g. AUTOTUNE_PERF); None when it found no stable windows, or a
    window without a completed request (a busy machine)."""
    csv_path = scratch / f"{server.name}-{cell.replace(' ', '-')}-c{concurrency}.csv"
    command = [
        *((str(binary),) if isinstance(binary, Path) else binary),
        *("-m", model, "-u", server.urls[protocol], "-i", protocol, *flags),
        *("--concurrency-range", str(concurrency), "-p", str(window_ms)),
        # A shared 2-core machine: looser stability than the default 10%, more windows.
        *STABILITY_FLAGS,
        *("-f", str(csv_path)),
    ]
    result = subprocess.run(tied_command(command), capture_output=True, text=True, timeout=600)
    if result.returncode != 0 and any(text in result.stdout + result.stderr for text in NO_FIGURE):
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
        server.name, cell, concurrency, float(row["Inferences/Second"]), int(row["p95 latency"])
    )


def measure_settings(args: Any) -> dict[str, Any]:
    """How `measure` ran, for a raw results record: the sweep's protocols, concurrencies,
    repeats, windows and attempts, and perf_analyzer's stability flags."""
    return {
        "protocols": args.protocols,
        "concurrency": args.concurrency,
        "repeats": args.repeats,
        "window_ms": args.window_ms,
        "attempts": args.attempts,
        "perf_analyzer": f"2.51, {' '.join(STABILITY_FLAGS)}",
    }


def measure(
    attempts: int,
    label: str,
    binary: Path | Sequence[str],
    server: Server,
    model: str,
    protocol: str,
    concurrency: int,
    window_ms: int,
    scratch: Path,
    cell: str,
    flags: Sequence[str] = (),
) -> Run | None:
    """perf_analyzer up to `attempts` times until its windows are stable; prints the run."""
    for _ in range(attempts):
        run = perf_analyzer(
            binary, server, model, protocol, concurrency, window_ms, scratch, cell, flags
        )
        if run is not None:
            print(
                f"{label} {run.infer_per_s:>9,.0f} infer/s  p95 {run.p95_us / 1000:5.2f} ms",
                flush=True,
            )
            return run
        print(f"{label} no stable windows; measuring again", flush=True)
    print(f"{label} skipped: no stable windows", flush=True)
    return None


def cpu_seconds(process: psutil.Process, live_children: bool = False) -> float:
    """User + system CPU seconds of `process` and of its children that have exited; with
    `live_children`, of those still running too (tritonserver's python stubs)."""
    times = process.cpu_times()
    total = times.user + times.system + times.children_user + times.children_system
    if live_children:
        for child in process.children(recursive=True):
            try:
                child_times = child.cpu_times()
            except psutil.NoSuchProcess:
                continue
            total += child_times.user + child_times.system
    return total


def median_range(values: Sequence[float], spec: str) -> str:
    """ "median [lowest-highest]", each formatted with `spec`; "-" for no values."""
    if not values:
        return "-"
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{mid:{spec}} [{low:{spec}}-{high:{spec}}]"


def describe(runs: list[Run]) -> str:
    rates = [run.infer_per_s for run in runs]
    p95 = statistics.median(run.p95_us for run in runs) / 1000
    return (
        f"{statistics.median(rates):>8,.0f} [{min(rates):>6,.0f}-{max(rates):>6,.0f}]"
        f" p95 {p95:5.2f} ms n={len(runs)}"
    )


def summary(runs: list[Run], cells: Sequence[str], concurrencies: Sequence[int]) -> None:
    """Per cell and concurrency: each server's median infer/s [range], median p95, and the
    ratio ours/triton of the medians."""
    width = max([18, *(len(cell) + 4 for cell in cells)])
    print()
    print("median infer/s [range] and median p95, per cell and concurrency")
    print(f"{'':<{width}} {'ours':>40} {'triton':>40} {'ours/triton':>12}")
    for cell_name in cells:
        for concurrency in concurrencies:
            cell = [r for r in runs if r.cell == cell_name and r.concurrency == concurrency]
            mine = [r for r in cell if r.server == "ours"]
            theirs = [r for r in cell if r.server == "triton"]
            label = f"{cell_name} c{concurrency}"
            left = describe(mine) if mine else "(not measured)"
            right = describe(theirs) if theirs else "(not measured)"
            ratio = "-"
            if mine and theirs:
                ours_median = statistics.median(r.infer_per_s for r in mine)
                ratio = f"{ours_median / statistics.median(r.infer_per_s for r in theirs):.2f}"
            print(f"{label:<{width}} {left:>40} {right:>40} {ratio:>12}")


@contextmanager
def worktree(rev: str, path: Path) -> Iterator[Path]:
    """A detached git worktree of `rev` at `path`, removed on exit."""
    subprocess.run(
        ["git", "worktree", "add", "--detach", str(path), rev],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    try:
        yield path
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=ROOT, check=False)


def revision() -> str:
    result = subprocess.run(
        ["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True
    )
    return result.stdout.strip() or "unknown"


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def run_main(main: Callable[[], None]) -> None:
    """Run `main()` so that Ctrl-C and SIGTERM unwind it (its context managers stop both
    servers); SIGINT also when the shell started the script with it ignored (a background job)."""
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        main()
    except KeyboardInterrupt:
        sys.exit("interrupted: both servers stopped")


# The python-backend form of `simple`, for Triton (and for ours with --ours-backend python).
SIMPLE_MODEL = '''"""simple: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1"""

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
