"""`autotune baseline -i grpc` records the protocol and measures over gRPC, and `autotune gate`
measures again over what the baseline recorded: against a running server's gRPC endpoint
(--url; HTTP would not answer there) and against its own private server."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.e2e.conftest import autotune
from tests.support.server_process import start_server, stop_server

SHORT = ("--measurement-interval", "300", "--concurrency", "1", "--repeats", "1")
LOOSE = ("--tolerance", "60%", "--latency-tolerance", "250%", "--retries", "3")


@pytest.fixture
def work(tmp_path: Path, bundled_repository: Path) -> Path:
    shutil.copytree(bundled_repository / "simple", tmp_path / "model_repository" / "simple")
    return tmp_path


def test_baseline_and_gate_over_grpc(work: Path) -> None:
    server = start_server(work / "model_repository", work / "server.log")
    try:
        result = autotune(
            work, "baseline", "-i", "grpc", "--url", server.grpc_url, *SHORT, timeout=180
        )
        assert result.returncode == 0, result.stdout + result.stderr
        document = json.loads((work / "perf-baseline.json").read_text())
        assert document["settings"]["protocol"] == "grpc"
        (load,) = document["models"][0]["loads"]
        assert load["throughput"] > 0 and load["error_count"] == 0

        # The gate speaks the baseline's protocol: the gRPC endpoint answers it.
        gated = autotune(work, "gate", "--url", server.grpc_url, *LOOSE, timeout=180)
        assert gated.returncode == 0, gated.stdout + gated.stderr
        assert "gate passed: 2 checks" in gated.stdout
    finally:
        stop_server(server)

    # Its own server: the gate finds that server's gRPC endpoint.
    private = autotune(work, "gate", *LOOSE, timeout=240)
    assert private.returncode == 0, private.stdout + private.stderr
    assert "gate passed: 2 checks" in private.stdout


def test_baseline_over_http_at_a_grpc_endpoint_is_an_environment_error(work: Path) -> None:
    server = start_server(work / "model_repository", work / "server.log")
    try:
        result = autotune(work, "baseline", "--url", server.grpc_url, *SHORT, timeout=120)
    finally:
        stop_server(server)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
