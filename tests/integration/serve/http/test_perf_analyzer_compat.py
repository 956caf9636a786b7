"""NVIDIA's real perf_analyzer (C++, from tritonclient 2.51) against our server over HTTP.

perf_analyzer reads GET /v2, the model's metadata, config and statistics, sends binary-tensor
infer requests, and computes its server-side figures from statistics deltas; a field it needs
missing, or a wrong count, makes it fail or print nonsense.
"""

from __future__ import annotations

import csv
import re
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.support.perf_analyzer import LOOSE_STABILITY, perf_analyzer_path
from tests.support.server_process import RunningServer

CSV_HEADER = [
    "Concurrency",
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

# One block per concurrency level of perf_analyzer's stdout.
_LEVEL = re.compile(
    r"Request concurrency: (?P<concurrency>\d+)\s+Client:\s+Request count: (?P<client>\d+)"
    r".*?Server:\s+Inference count: (?P<inferences>\d+)\s+Execution count: (?P<executions>\d+)"
    r"\s+Successful request count: (?P<success>\d+)"
    r"\s+Avg request latency: (?P<latency>\d+) usec .*?compute infer (?P<infer>\d+) usec",
    re.S,
)


def _inference_stats(server: RunningServer, model: str) -> dict[str, dict[str, int]]:
    response = httpx.get(f"{server.base}/v2/models/{model}/stats", timeout=10)
    response.raise_for_status()
    (entry,) = response.json()["model_stats"]
    stats: dict[str, dict[str, int]] = entry["inference_stats"]
    return stats


@pytest.mark.parametrize("model", ["simple", "digits", "add_sub_py"])
def test_perf_analyzer_profiles_model(server: RunningServer, model: str, tmp_path: Path) -> None:
    binary = perf_analyzer_path()
    csv_path = tmp_path / f"{model}.csv"
    before = _inference_stats(server, model)
    command = [
        str(binary),
        *("-m", model, "-u", server.url, "-i", "http"),
        *("--concurrency-range", "1:2", "-p", "1000"),
        *LOOSE_STABILITY,
        *("-f", str(csv_path)),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=150)
    output = f"{' '.join(command)}\n{result.stdout}\n{result.stderr}"
    assert result.returncode == 0, output
    after = _inference_stats(server, model)

    # The CSV: perf_analyzer's header and one row per concurrency level.
    with csv_path.open(newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == CSV_HEADER, output
    by_concurrency = {int(row[0]): row for row in rows[1:]}
    assert sorted(by_concurrency) == [1, 2], output
    for row in by_concurrency.values():
        assert float(row[1]) > 0, output  # Inferences/Second
        assert int(row[CSV_HEADER.index("p95 latency")]) > 0, output

    # The stdout: client and server figures per level, from our statistics deltas.
    levels = [match.groupdict() for match in _LEVEL.finditer(result.stdout)]
    assert [int(level["concurrency"]) for level in levels] == [1, 2], output
    for level in levels:
        concurrency = int(level["concurrency"])
        client, success = int(level["client"]), int(level["success"])
        assert client > 0, output
        # Batch size 1: one inference per request, at most one execution per request.
        assert int(level["inferences"]) == success, output
        assert 0 < int(level["executions"]) <= success, output
        # perf_analyzer reads our statistics at each window's edges (windows are contiguous, 3
        # stable ones merged); only requests finishing while a statistics call is under way
        # can land on the other side of an edge, a handful against thousands.
        assert abs(success - client) <= 6 * concurrency + client // 20, output
        assert int(level["latency"]) > 0 and int(level["infer"]) > 0, output

    # Over the whole run (warm-up and unstable windows included) the server counted every
    # request perf_analyzer reported, and none failed.
    reported = sum(int(level["client"]) for level in levels)
    assert after["success"]["count"] - before["success"]["count"] >= reported, output
    assert after["fail"]["count"] == before["fail"]["count"], output
    for key in ("queue", "compute_input", "compute_infer", "compute_output"):
        assert after[key]["count"] - before[key]["count"] == (
            after["success"]["count"] - before["success"]["count"]
        )
