"""Start and stop a real `autotune serve` process on a free loopback port: the launcher the
tuner and the gate use (common.serve_process), plus a wait until the server reports ready."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from common.serve_process import start_serve_process, stop_serve_process

# For a repository holding models that fail to load on purpose while the others serve:
# tritonserver's default (and ours), --exit-on-error true, would stop the server instead.
SERVE_BROKEN = ("--exit-on-error", "false")

# The front-end processes every test server runs with (`--workers`): the test tier of
# `autotune serve --workers 2` sets it (scripts/run_tests.sh); unset, the servers run as started.
WORKERS_ENV = "AUTOTUNE_TEST_SERVE_WORKERS"

# --workers runs the native front ends only: a server started with another keeps one process.
_OTHER_FRONT_ENDS = ("--http-front-end=uvicorn", "uvicorn", "--grpc-front-end=grpcio", "grpcio")

_GRPC_STARTED = re.compile(r"Started GRPCInferenceService at ([0-9.]+):(\d+)")
_METRICS_STARTED = re.compile(r"Started Metrics Service at ([0-9.]+):(\d+)")


@dataclass
class RunningServer:
    process: subprocess.Popen[bytes]
    host: str
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        """host:port, as tritonclient wants it."""
        return f"{self.host}:{self.port}"

    @property
    def base(self) -> str:
        return f"http://{self.url}"

    @property
    def grpc_url(self) -> str:
        """host:port of the gRPC endpoint, from the server's "Started GRPCInferenceService at"
        log line (the endpoints start one after another: it may come just after HTTP's)."""
        return self._logged_address(_GRPC_STARTED, "gRPC")

    @property
    def metrics_url(self) -> str:
        """host:port of the metrics endpoint, from its "Started Metrics Service at" line."""
        return self._logged_address(_METRICS_STARTED, "metrics")

    def _logged_address(self, started: re.Pattern[str], endpoint: str) -> str:
        deadline = time.monotonic() + 30
        while True:
            match = started.search(self.log())
            if match:
                return f"{match.group(1)}:{match.group(2)}"
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"the server logged no {endpoint} endpoint:\n{self.log()[-2000:]}"
                )
            time.sleep(0.05)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def start_server(
    repository: Path, log_path: Path, *extra: str, timeout: float = 120.0
) -> RunningServer:
    """Run `python -m serve` with --http-port 0 and wait until it serves and reports ready;
    RuntimeError (with the log's tail) when it does not."""
    deadline = time.monotonic() + timeout
    process, address = start_serve_process(repository, log_path, _with_workers(extra), timeout)
    host, _, port = address.rpartition(":")
    server = RunningServer(process, host, int(port), log_path)
    try:
        _wait_ready(server, deadline)
    except BaseException:
        stop_serve_process(process)
        raise
    return server


def _with_workers(flags: tuple[str, ...]) -> tuple[str, ...]:
    workers = os.environ.get(WORKERS_ENV, "")
    if not workers or "--workers" in flags or any(f in flags for f in _OTHER_FRONT_ENDS):
        return flags
    return ("--workers", workers, *flags)


def _wait_ready(server: RunningServer, deadline: float) -> None:
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{server.base}/v2/health/ready", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise RuntimeError("server never became ready")


def stop_server(server: RunningServer, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
    """Signal the server and wait for it to exit; a server that hangs is killed and fails the
    caller (RuntimeError). Returns the exit code."""
    code = stop_serve_process(server.process, timeout, sig)
    if code == -signal.SIGKILL:
        raise RuntimeError(f"the server did not exit within {timeout} s of signal {sig}; killed")
    return code


@contextmanager
def serving(repository: Path, log_path: Path, *extra: str) -> Iterator[RunningServer]:
    """`start_server` for the body of a `with`; stopped on exit."""
    running = start_server(repository, log_path, *extra)
    try:
        yield running
    finally:
        stop_server(running)


@contextmanager
def server_on_links(root: Path, models: Iterable[Path], *extra: str) -> Iterator[RunningServer]:
    """A server started with `extra` flags on root/repository, a repository holding a link to
    each model folder of `models`; stopped on exit."""
    repository = root / "repository"
    repository.mkdir()
    for model in models:
        (repository / model.name).symlink_to(model, target_is_directory=True)
    with serving(repository, root / "server.log", *extra) as running:
        yield running


def connect(server: RunningServer, timeout_s: float = 10.0) -> socket.socket:
    """A plain TCP connection to the server's HTTP endpoint."""
    return socket.create_connection((server.host, server.port), timeout=timeout_s)


def refused_start(repository: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """`python -m serve` on `repository` with `flags`, expected to stop before serving (a
    usage error): its exit status and output, within a minute."""
    return subprocess.run(
        [sys.executable, "-m", "serve", "--model-repository", str(repository), *flags],
        capture_output=True,
        text=True,
        timeout=60,
    )
