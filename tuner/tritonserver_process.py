"""A private tritonserver for tuning (the tuner's `--server tritonserver`): started on free
loopback ports (HTTP, gRPC, metrics) in explicit model control, on the scratch repository the
tuner builds; it ends with the tuner (even one killed), and stopping it ends its python
backend stubs too."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from common.serve_process import log_tail
from common.tied_child import tied_command
from protocol.client import BlockingClient
from protocol.errors import ClientError
from tuner.errors import TunerError

STOP_TIMEOUT_S = 30.0


class TritonStartError(TunerError):
    """tritonserver did not start; the message says why (with its log's last line)."""


@dataclass(frozen=True, slots=True)
class TritonProcess:
    """A running private tritonserver and its endpoints (host:port each)."""

    process: subprocess.Popen[bytes]
    http: str  # host:port
    grpc: str
    metrics: str


def find_tritonserver(path: Path | None) -> Path:
    """`path`, or the `tritonserver` on PATH; TritonStartError when there is none."""
    if path is not None:
        if not path.is_file():
            raise TritonStartError(f"--tritonserver {path}: no such file")
        return path
    found = shutil.which("tritonserver")
    if found is None:
        raise TritonStartError("no tritonserver on PATH: name it with --tritonserver PATH")
    return Path(found)


def free_ports(count: int) -> list[int]:
    """`count` distinct ports free on 127.0.0.1 now."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


def start_tritonserver(
    executable: Path,
    repository: Path,
    log_path: Path,
    server_args: Sequence[str] = (),
    timeout_s: float = 120.0,
) -> TritonProcess:
    """Start tritonserver on `repository` (explicit model control, nothing loaded) and wait
    until it is live; `server_args` are passed through after ours (Triton's own flags)."""
    http, grpc, metrics = free_ports(3)
    command = [
        str(executable),
        "--model-repository",
        str(repository.resolve()),
        "--model-control-mode",
        "explicit",
        "--http-address",
        "127.0.0.1",
        "--http-port",
        str(http),
        "--grpc-address",
        "127.0.0.1",
        "--grpc-port",
        str(grpc),
        "--metrics-address",
        "127.0.0.1",
        "--metrics-port",
        str(metrics),
        "--allow-metrics=true",
        *server_args,
    ]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        process = subprocess.Popen(tied_command(command), stdout=log, stderr=subprocess.STDOUT)
    started = TritonProcess(
        process, f"127.0.0.1:{http}", f"127.0.0.1:{grpc}", f"127.0.0.1:{metrics}"
    )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        try:
            BlockingClient(started.http, timeout_s=2.0).server_metadata()
            return started
        except ClientError:
            time.sleep(0.1)
    stop_tritonserver(process)
    last = log_tail(log_path, 1).strip() or "its log is empty"
    raise TritonStartError(f"tritonserver did not start: {last} (its log: {log_path})")


def stop_tritonserver(process: subprocess.Popen[bytes], timeout_s: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM (it drains), SIGKILL after `timeout_s`; then whatever of its children (python
    backend stubs) is still running is killed."""
    try:
        children = psutil.Process(process.pid).children(recursive=True)
    except psutil.Error:
        children = []
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    for child in children:
        with contextlib.suppress(psutil.Error):
            child.kill()
    psutil.wait_procs(children, timeout=5.0)
