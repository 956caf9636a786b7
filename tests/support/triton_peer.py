"""NVIDIA's tritonserver 2.51 (CPU, python backend), installed by
scripts/install_triton_peer.sh: located (installed first when needed), started on free
loopback ports in explicit model control, stopped with its python backend stubs."""

from __future__ import annotations

import contextlib
import functools
import subprocess
from collections.abc import Iterator
from pathlib import Path

from tuner.tritonserver_process import TritonProcess, start_tritonserver, stop_tritonserver

PROJECT_ROOT = Path(__file__).resolve().parents[2]
INSTALL_SCRIPT = PROJECT_ROOT / "scripts" / "install_triton_peer.sh"
INSTALL_TIMEOUT_S = 900


class TritonUnavailable(RuntimeError):
    """The install script failed or did not produce a runnable wrapper."""


@functools.cache
def tritonserver_path() -> Path:
    """The wrapper that runs tritonserver 2.51 (the script is idempotent: quick when done)."""
    result = subprocess.run(
        ["bash", str(INSTALL_SCRIPT)],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_S,
    )
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines or not Path(lines[-1]).is_file():
        raise TritonUnavailable(f"{INSTALL_SCRIPT} failed:\n{result.stdout}\n{result.stderr}")
    return Path(lines[-1])


@contextlib.contextmanager
def running_tritonserver(repository: Path, log_path: Path, *flags: str) -> Iterator[TritonProcess]:
    """tritonserver on `repository` (explicit model control; `flags` after ours, e.g.
    --load-model NAME), stopped at the end."""
    started = start_tritonserver(tritonserver_path(), repository, log_path, flags)
    try:
        yield started
    finally:
        stop_tritonserver(started.process)
