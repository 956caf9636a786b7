"""Start and stop a real `autotune serve` process on a free loopback port."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

_STARTED = re.compile(r"Started HTTPService at ([0-9.]+):(\d+)")


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

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def start_server(
    repository: Path, log_path: Path, *extra: str, timeout: float = 120.0
) -> RunningServer:
    """Run `python -m serve` with --http-port 0 and wait until it serves and reports ready."""
    log_file = log_path.open("wb")
    command = [
        sys.executable,
        "-m",
        "serve",
        "--model-repository",
        str(repository),
        "--http-port",
        "0",
        "--host",
        "127.0.0.1",
        *extra,
    ]
    process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, env=os.environ)
    log_file.close()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        match = _STARTED.search(log_path.read_text(errors="replace"))
        if match:
            server = RunningServer(process, match.group(1), int(match.group(2)), log_path)
            _wait_ready(server, deadline)
            return server
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}:\n{log_path.read_text()}")
        time.sleep(0.05)
    process.kill()
    process.wait()
    raise RuntimeError(f"server did not start within {timeout} s:\n{log_path.read_text()}")


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
    """Signal the server and wait for it to exit; kill it if it hangs. Returns the exit code."""
    if server.process.poll() is None:
        server.process.send_signal(sig)
        try:
            server.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait()
            raise
    return server.process.returncode
