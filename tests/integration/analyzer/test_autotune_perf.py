"""`autotune perf` as a user runs it, against our server on the bundled models.

Short windows and a generous stability rule (-p 500, -s 50, -r 20) keep these runs quick and
robust on a busy 2-core machine; the CSV's numbers are checked against the server's own
statistics read before and after each run.
"""

from __future__ import annotations

import csv
import json
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import BUNDLED_REPOSITORY
from tests.support.server_process import RunningServer

PA_COLUMNS = [
    "Inferences/Second",
    "Client Send",
    "Network+Server Send/Recv",
    "Server Queue",
    "Server Compute Input",
    "Server Compute Infer",
    "Server Compute Output",
    "Client Recv",
    "p50 latency",
    "p90 latency",
    "p95 latency",
    "p99 latency",
]
QUICK = ["-p", "500", "-s", "50", "-r", "20"]


@dataclass
class PerfRun:
    returncode: int
    stdout: str
    stderr: str
    rows: list[dict[str, str]]
    header: list[str]
    measurements: list[dict[str, Any]]


def autotune_perf(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", "from tuner.cli import main; main()", "perf", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def run_perf(server: RunningServer, tmp_path: Path, *args: str) -> PerfRun:
    csv_path = tmp_path / "perf.csv"
    json_path = tmp_path / "perf.json"
    result = autotune_perf(
        "-u", server.url, "-f", str(csv_path), "--json", str(json_path), *QUICK, *args
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    with csv_path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        rows = list(reader)
        header = list(reader.fieldnames or [])
    return PerfRun(
        result.returncode,
        result.stdout,
        result.stderr,
        rows,
        header,
        json.loads(json_path.read_text()),
    )


def model_stats(server: RunningServer, model: str) -> dict[str, Any]:
    stats = httpx.get(f"{server.base}/v2/models/{model}/stats", timeout=10).json()
    entry: dict[str, Any] = stats["model_stats"][0]
    return entry


def success_count(entry: dict[str, Any]) -> int:
    return int(entry["inference_stats"]["success"]["count"])


def check_against_server(
    run: PerfRun, before: dict[str, Any], after: dict[str, Any], batch_size: int
) -> None:
    """The analyzer's counts fit inside the server's, and the CSV matches the JSON."""
    served = success_count(after) - success_count(before)
    counted = sum(m["request_count"] for m in run.measurements)
    assert served >= counted > 0
    inferred = after["inference_count"] - before["inference_count"]
    assert inferred == served * batch_size
    by_level = {str(m["concurrency"] or f"{m['request_rate']:g}"): m for m in run.measurements}
    for row in run.rows:
        level = row.get("Concurrency") or row["Request Rate"]
        m = by_level[level]
        server = m["server"]
        assert server["available"]
        assert server["inference_count"] == server["request_count"] * batch_size
        assert server["request_count"] <= served
        assert float(row["Inferences/Second"]) == pytest.approx(m["throughput"], rel=1e-4)
        assert m["throughput"] == pytest.approx(m["request_throughput"] * batch_size)
        for p in (50, 90, 95, 99):
            assert int(row[f"p{p} latency"]) == int(m[f"latency_p{p}_us"])
        assert int(row["Server Queue"]) == int(server["queue_us"])
        assert int(row["Server Compute Infer"]) == int(server["compute_infer_us"]) > 0
        assert int(row["Client Send"]) == int(m["client_send_us"])
        assert 0 <= int(row["Network+Server Send/Recv"]) <= int(m["latency_avg_us"])
        assert int(row["p50 latency"]) <= int(row["p99 latency"])
        assert m["error_count"] == 0 and m["stable"]


@pytest.mark.parametrize("model", ["simple", "digits", "resnet18", "add_sub_py"])
def test_concurrency_sweep_on_every_model(
    server: RunningServer, tmp_path: Path, model: str
) -> None:
    before = model_stats(server, model)
    run = run_perf(server, tmp_path, "-m", model, "--concurrency-range", "1:2")
    after = model_stats(server, model)
    assert run.header == ["Concurrency", *PA_COLUMNS]
    assert sorted(row["Concurrency"] for row in run.rows) == ["1", "2"]
    throughputs = [float(row["Inferences/Second"]) for row in run.rows]
    assert throughputs == sorted(throughputs)  # perf_analyzer sorts by throughput
    check_against_server(run, before, after, batch_size=1)
    assert "Concurrency 1:" in run.stdout and "Concurrency 2:" in run.stdout


def test_request_rate_mode_with_verbose_csv_and_percentile(
    server: RunningServer, tmp_path: Path
) -> None:
    before = model_stats(server, "simple")
    run = run_perf(
        server,
        tmp_path,
        "-m",
        "simple",
        "--request-rate-range",
        "100:200:100",
        "--verbose-csv",
        "--percentile",
        "90",
    )
    after = model_stats(server, "simple")
    assert run.header == [
        "Request Rate",
        *PA_COLUMNS,
        "request/response",
        "response wait",
    ]
    assert sorted(row["Request Rate"] for row in run.rows) == ["100", "200"]
    for m in run.measurements:
        assert m["concurrency"] == 0
        assert m["request_throughput"] == pytest.approx(m["request_rate"], rel=0.25)
    for row in run.rows:
        assert int(row["request/response"]) == int(row["Client Send"]) + int(row["Client Recv"])
    check_against_server(run, before, after, batch_size=1)


def test_zero_input_data_with_a_batch(server: RunningServer, tmp_path: Path) -> None:
    before = model_stats(server, "add_sub_py")
    run = run_perf(server, tmp_path, "-m", "add_sub_py", "--input-data", "zero", "-b", "4")
    after = model_stats(server, "add_sub_py")
    assert len(run.rows) == 1 and run.rows[0]["Concurrency"] == "1"
    assert run.measurements[0]["batch_size"] == 4
    check_against_server(run, before, after, batch_size=4)


def test_perf_analyzer_json_input_data(server: RunningServer, tmp_path: Path) -> None:
    data = BUNDLED_REPOSITORY / "digits" / "validation.json"
    before = model_stats(server, "digits")
    run = run_perf(server, tmp_path, "-m", "digits", "--input-data", str(data), "-b", "2")
    after = model_stats(server, "digits")
    check_against_server(run, before, after, batch_size=2)


def test_request_intervals_and_profile_export(server: RunningServer, tmp_path: Path) -> None:
    intervals = tmp_path / "intervals.txt"
    intervals.write_text("4000\n6000\n")  # 200 requests/s on average
    export = tmp_path / "export.json"
    started_ns = time.time_ns()
    run = run_perf(
        server,
        tmp_path,
        "-m",
        "simple",
        "--request-intervals",
        str(intervals),
        "--profile-export-file",
        str(export),
    )
    assert [row["Request Rate"] for row in run.rows] == ["200"]
    document = json.loads(export.read_text())
    assert {"experiments", "version", "service_kind", "endpoint"} <= set(document)
    (experiment,) = document["experiments"]
    assert experiment["experiment"] == {"mode": "request_rate", "value": 200.0}
    boundaries = experiment["window_boundaries"]
    assert boundaries == sorted(boundaries) and len(boundaries) >= 4
    assert started_ns < boundaries[0] < boundaries[-1] < time.time_ns()
    requests = experiment["requests"]
    assert len(requests) >= run.measurements[0]["request_count"]
    for request in requests:
        (end,) = request["response_timestamps"]
        assert request["timestamp"] < end
        assert boundaries[0] < end <= boundaries[-1]


def test_binary_search_reports_the_levels_within_the_threshold(
    server: RunningServer, tmp_path: Path
) -> None:
    run = run_perf(
        server,
        tmp_path,
        "-m",
        "simple",
        "--concurrency-range",
        "1:4",
        "--binary-search",
        "-l",
        "10000",
    )
    assert sorted(row["Concurrency"] for row in run.rows) == ["1", "4"]  # both ends pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_failures_end_with_one_clear_line(server: RunningServer, tmp_path: Path) -> None:
    """Each case runs in its own process, all at once; none may print a traceback."""
    url = server.url
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{"data": [{"input": [1, 2, 3]}]}')
    cases: dict[str, tuple[list[str], str]] = {
        "unknown model": (["-m", "nosuch", "-u", url], "nosuch"),
        "unreachable server": (["-m", "simple", "-u", f"127.0.0.1:{free_port()}"], "reach"),
        "shape mismatch": (["-m", "simple", "-u", url, "--shape", "INPUT0:3"], "INPUT0"),
        "bad JSON data": (["-m", "digits", "-u", url, "--input-data", str(bad_json)], "input"),
        "batch too large": (["-m", "simple", "-u", url, "-b", "9"], "max_batch_size"),
        "malformed range": (["-m", "simple", "-u", url, "--concurrency-range", "1:x"], "range"),
        "over the threshold": (["-m", "simple", "-u", url, "-l", "0.01"], "latency threshold"),
        "never stable": (["-m", "simple", "-u", url, "-s", "0.0001", "-r", "3"], "stable"),
    }
    command = [sys.executable, "-c", "from tuner.cli import main; main()", "perf", "-p", "300"]
    processes = {
        name: subprocess.Popen(
            [*command, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for name, (args, _) in cases.items()
    }
    for name, process in processes.items():
        _, stderr = process.communicate(timeout=120)
        expected = cases[name][1]
        assert process.returncode != 0, name
        assert "Traceback" not in stderr, (name, stderr)
        messages = [line for line in stderr.splitlines() if line.lower().startswith("error:")]
        assert len(messages) == 1, (name, stderr)
        assert expected in messages[0], (name, stderr)


def test_find_max_load_api_against_the_server(server: RunningServer) -> None:
    """The tuner's entry point: doubling from 1 up to max_level within a generous limit."""
    from analyzer import LoadOptions, MeasureSettings, find_max_load

    settings = MeasureSettings(measurement_interval_ms=500, stability_percentage=50, max_trials=20)
    options = LoadOptions(url=server.url, model="digits")
    before = model_stats(server, "digits")
    result = find_max_load(options, settings, latency_limit_us=5_000_000, max_level=2)
    after = model_stats(server, "digits")
    assert result.found and result.max_level == 2
    assert [m.concurrency for m in result.measurements] == [1, 2]
    assert result.best is not None and result.best.server.available
    counted = sum(m.request_count for m in result.measurements)
    assert success_count(after) - success_count(before) >= counted
