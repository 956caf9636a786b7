"""Start-up time: from launching a server to its GET /v2/health/ready answering 200.

The clock starts just before the process is launched and stops at the first 200 of
/v2/health/ready, polled every POLL_INTERVAL_S on 127.0.0.1 (a refused connection or another
status is polled again); the server is stopped after each start. Both servers are strict about
readiness: ready once every model of the repository has loaded.

- ours: `autotune serve --model-repository <repository>`, run as the console script runs it
  (`python -c "from tuner.cli import main; main()" serve ...`, so this checkout's code), HTTP,
  gRPC and metrics on free 127.0.0.1 ports;
- Triton 2.51: the wrapper scripts/install_triton_peer.sh prints, on its repository.
Used by benchmarks/vs_triton.py (every start's seconds are in its raw results,
benchmarks/results/vs_triton*.json, under "startups") and, for its command and timing,
benchmarks/startup_ab.py; not a script.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from peer import free_port, triton_command, wait_until_ready

from common.serve_process import stop_serve_process
from common.tied_child import tied_env

POLL_INTERVAL_S = 0.01
READY_TIMEOUT_S = 180.0
CONSOLE_SCRIPT = "from tuner.cli import main; main()"


@dataclass(frozen=True)
class Startup:
    server: str
    repository: str  # how the table names it
    seconds: list[float]

    def describe(self) -> str:
        if not self.seconds:
            return "(not measured)"
        return (
            f"{statistics.median(self.seconds):.2f} s "
            f"[{min(self.seconds):.2f}-{max(self.seconds):.2f}] n={len(self.seconds)}"
        )


def ours_command(repository: Path, http_port: int) -> list[str]:
    return [
        sys.executable,
        *("-c", CONSOLE_SCRIPT, "serve"),
        *("--model-repository", str(repository)),
        *("--http-address", "127.0.0.1", "--http-port", str(http_port)),
        *("--grpc-address", "127.0.0.1", "--grpc-port", str(free_port())),
        *("--metrics-address", "127.0.0.1", "--metrics-port", str(free_port())),
    ]


def time_to_ready(command: Sequence[str], http_port: int, log: Path) -> float:
    """Seconds from launching `command` to /v2/health/ready answering 200 on `http_port`."""
    with log.open("wb") as out:
        started = time.perf_counter()
        process = subprocess.Popen(
            # Our server ends with this process; Triton (no start-up cost added to its
            # figure) only with the stop below.
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=tied_env(),
        )
    try:
        wait_until_ready(process, f"127.0.0.1:{http_port}", log, READY_TIMEOUT_S, POLL_INTERVAL_S)
        return time.perf_counter() - started
    finally:
        stop_serve_process(process)


def measure_startups(
    candidates: Sequence[tuple[str, str, Path]],
    triton_wrapper: Path,
    repeats: int,
    scratch: Path,
) -> list[Startup]:
    """Each (server, label, repository) started `repeats` times, the servers interleaved; every
    start printed."""
    results = {(server, label): Startup(server, label, []) for server, label, _ in candidates}
    for repeat in range(1, repeats + 1):
        for server, label, repository in candidates:
            port = free_port()
            command = (
                triton_command(triton_wrapper, repository, port)
                if server == "triton"
                else ours_command(repository, port)
            )
            seconds = time_to_ready(command, port, scratch / f"startup-{server}.log")
            results[server, label].seconds.append(seconds)
            print(f"start-up #{repeat} {server} ({label}): ready in {seconds:.2f} s", flush=True)
    return list(results.values())
