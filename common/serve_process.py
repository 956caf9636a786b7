"""A private `autotune serve` process on free loopback ports, as the tuner, the gate and the
tests run it: started, its addresses (HTTP, gRPC) read from its log, stopped; it dies with its
parent."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from common.tied_child import tied_env

_STARTED = re.compile(r"Started HTTPService at ([0-9.]+):(\d+)")
GRPC_SERVICE = "GRPCInferenceService"


class ServeProcessError(RuntimeError):
    """The server did not start; the message ends with the tail of its log."""


def log_tail(log_path: Path, lines: int = 20) -> str:
    """The last `lines` lines of a server's log, for an error message; "" when the log cannot
    be read."""
    try:
        return "\n".join(log_path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def serve_env(code: Path | None = None) -> dict[str, str]:
    """The environment of a server process tied to this one; `code`: a source tree (another
    revision's checkout) whose packages it imports first (start it with that as its cwd too)."""
    return tied_env() if code is None else tied_env(dict(os.environ, PYTHONPATH=str(code)))


def start_serve_process(
    repository: Path,
    log_path: Path,
    extra: Sequence[str] = (),
    timeout_s: float = 180.0,
    code: Path | None = None,
) -> tuple[subprocess.Popen[bytes], str]:
    """Start the server on `repository` and return the process and its host:port. `code`: run
    the server of that source tree (a checkout of another revision) instead of this one."""
    command = [
        sys.executable,
        "-m",
        "serve",
        "--model-repository",
        str(repository),
        "--http-port",
        "0",
        "--http-address",
        "127.0.0.1",
        "--grpc-port",
        "0",
        "--grpc-address",
        "127.0.0.1",
        "--metrics-port",
        "0",
        "--metrics-address",
        "127.0.0.1",
        *extra,
    ]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=serve_env(code), cwd=code
        )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        match = _STARTED.search(log_path.read_text(errors="replace"))
        if match:
            return process, f"{match.group(1)}:{match.group(2)}"
        if process.poll() is not None:
            break
        time.sleep(0.05)
    stop_serve_process(process)
    raise ServeProcessError(f"the server on {repository} did not start:\n{log_tail(log_path)}")


def service_address(
    log_path: Path,
    process: subprocess.Popen[bytes],
    service: str = GRPC_SERVICE,
    timeout_s: float = 30.0,
) -> str:
    """host:port of another endpoint of a server `start_serve_process` started, from its
    "Started <service> at host:port" log line (endpoints start one after another, so it may
    follow the HTTP line); ServeProcessError when the line does not come."""
    started = re.compile(rf"Started {re.escape(service)} at ([0-9.]+):(\d+)")
    deadline = time.monotonic() + timeout_s
    while True:
        match = started.search(log_path.read_text(errors="replace"))
        if match:
            return f"{match.group(1)}:{match.group(2)}"
        if process.poll() is not None or time.monotonic() > deadline:
            raise ServeProcessError(
                f"the server logged no {service} endpoint:\n{log_tail(log_path)}"
            )
        time.sleep(0.05)


def stop_serve_process(
    process: subprocess.Popen[bytes], timeout_s: float = 30.0, sig: int = signal.SIGTERM
) -> int:
    """SIGTERM, or `sig` (the server drains), then SIGKILL if it does not exit in time.
    Returns its exit code (`-signal.SIGKILL` when it had to be killed)."""
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode
