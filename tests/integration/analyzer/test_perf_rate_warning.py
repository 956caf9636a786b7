"""`autotune perf` asked for a request rate it cannot keep: it says so, on the console and in
the JSON measurement, as perf_analyzer warns about delayed requests.

The model answers one request per 50 ms (20/s); 200 requests/s are asked with at most 4
connections, so each due request waits for a connection to free and leaves late.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import RepositoryFactory
from tests.support.server_process import RunningServer, start_server, stop_server

MODEL = "slow_py"
SLOW_MODEL = f"""# from: add_sub_py
name: "{MODEL}"
backend: "python"
max_batch_size: 8
input [{{ name: "INPUT0" data_type: TYPE_FP32 dims: [16] }},
       {{ name: "INPUT1" data_type: TYPE_FP32 dims: [16] }}]
output [{{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [16] }},
        {{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [16] }}]
instance_group [{{ count: 1 kind: KIND_CPU }}]
parameters {{ key: "EXECUTE_DELAY_MS" value {{ string_value: "50" }} }}
"""
WARNING = "the client could not keep up with the desired request rate"


@pytest.fixture
def slow_server(make_repository: RepositoryFactory, tmp_path: Path) -> Iterator[RunningServer]:
    repository = make_repository({MODEL: SLOW_MODEL})
    running = start_server(repository, tmp_path / "server.log")
    try:
        yield running
    finally:
        stop_server(running)


def test_an_impossible_request_rate_is_reported(slow_server: RunningServer, tmp_path: Path) -> None:
    json_path = tmp_path / "perf.json"
    command = [
        sys.executable,
        *("-c", "from tuner.cli import main; main()", "perf"),
        *("-m", MODEL, "-u", slow_server.url, "--request-rate-range", "200"),
        *("--max-connections", "4", "--async"),
        *("-p", "1000", "-s", "50", "-r", "6", "--json", str(json_path)),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    output = f"{' '.join(command)}\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr, output

    warnings = [line for line in result.stderr.splitlines() if WARNING in line]
    assert len(warnings) == 1, output
    assert warnings[0].startswith("warning: request rate 200/s: "), output
    assert "all 4 connections busy" in warnings[0], output

    assert result.returncode == 0, output  # stable at the cap: the level is still reported
    (measurement,) = json.loads(json_path.read_text())
    assert measurement["request_rate"] == 200
    assert measurement["delayed_pct"] > 50, measurement
    assert measurement["send_rate"] < 100, measurement  # about 20/s: the model's pace
    assert any(WARNING in w for w in measurement["warnings"]), measurement


def test_a_connection_cap_is_refused_in_concurrency_mode(tmp_path: Path) -> None:
    command = [
        sys.executable,
        *("-c", "from tuner.cli import main; main()", "perf"),
        *("-m", MODEL, "-u", "127.0.0.1:1", "--concurrency-range", "2"),
        *("--max-connections", "4"),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "--max-connections applies to --request-rate-range" in result.stderr
