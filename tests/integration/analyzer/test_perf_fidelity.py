"""`autotune perf` measures the same throughput as NVIDIA's perf_analyzer.

Both tools drive the same server and model at the same concurrencies with the same window
settings, one after the other (never at the same time), and their CSV throughputs must agree
within 10% at each level.

The model sleeps 20 ms per execution and has one instance per concurrency slot, so a request's
latency is the service time plus a millisecond of server overhead and the throughput is close to
concurrency / latency whichever client sends. On a ~50 us model the comparison would measure the
clients' own CPU cost instead (each adds its own latency per request on 2 shared cores); here
that difference is under 2% of a request's time, and what remains is the measurement method:
windows, stability, merging and counting. With one instance a delay model is bistable (the
requests settle into one batch per execution or into two alternating ones), which could split
the two tools by 2x; four instances leave nothing to queue at concurrency 4 or less.

The levels alternate between the tools (perf_analyzer at 1, ours at 1, then 2, ...) so that
the machine's drift over the run hits both alike. The figures go to `fidelity.json` in the
test's tmp dir and are printed (`pytest -s` shows them).
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import RepositoryFactory
from tests.support.perf_analyzer import perf_analyzer_path
from tests.support.server_process import RunningServer, start_server, stop_server

MODEL = "delay_py"
CONCURRENCIES = (1, 2, 4)
AGREEMENT = 0.10

DELAY_MODEL = f"""# from: add_sub_py
name: "{MODEL}"
backend: "python"
max_batch_size: 8
input [{{ name: "INPUT0" data_type: TYPE_FP32 dims: [16] }},
       {{ name: "INPUT1" data_type: TYPE_FP32 dims: [16] }}]
output [{{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [16] }},
        {{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [16] }}]
dynamic_batching {{ }}
instance_group [{{ count: {max(CONCURRENCIES)} kind: KIND_CPU }}]
parameters {{ key: "EXECUTE_DELAY_MS" value {{ string_value: "20" }} }}
"""

# The same windows for both tools: ~45 requests per 1 s window at concurrency 1; generous
# stability and trials for a noisy 2-core machine.
WINDOWS = [
    *("--measurement-mode", "time_windows"),
    *("-p", "1000"),
    *("-s", "25"),
    *("-r", "20"),
]


@pytest.fixture
def delay_server(make_repository: RepositoryFactory, tmp_path: Path) -> Iterator[RunningServer]:
    repository = make_repository({MODEL: DELAY_MODEL})
    running = start_server(repository, tmp_path / "server.log")
    try:
        yield running
    finally:
        stop_server(running)


def _run(command: list[str], csv_path: Path) -> dict[str, Any]:
    """Run one tool at one level; its CSV row's throughput and latencies."""
    result = subprocess.run(command, capture_output=True, text=True, timeout=150)
    output = f"{' '.join(command)}\n{result.stdout}\n{result.stderr}"
    assert result.returncode == 0, output
    with csv_path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 1, output
    return {
        "throughput": float(rows[0]["Inferences/Second"]),
        "p50_us": int(rows[0]["p50 latency"]),
        "p95_us": int(rows[0]["p95 latency"]),
    }


def test_throughput_matches_perf_analyzer(delay_server: RunningServer, tmp_path: Path) -> None:
    binary = perf_analyzer_path()
    target = ["-m", MODEL, "-u", delay_server.url]
    levels: list[dict[str, Any]] = []
    for concurrency in CONCURRENCIES:
        load = ["--concurrency-range", str(concurrency), "--sync", *WINDOWS]
        theirs_csv = tmp_path / f"perf_analyzer_c{concurrency}.csv"
        theirs = _run(
            [str(binary), *target, "-i", "http", *load, "-f", str(theirs_csv)], theirs_csv
        )
        ours_csv = tmp_path / f"autotune_c{concurrency}.csv"
        ours = _run(
            [
                *(sys.executable, "-c", "from tuner.cli import main; main()", "perf"),
                *target,
                *load,
                *("-f", str(ours_csv)),
            ],
            ours_csv,
        )
        levels.append(
            {
                "concurrency": concurrency,
                "perf_analyzer": theirs,
                "autotune": ours,
                "ratio": ours["throughput"] / theirs["throughput"],
            }
        )

    report = {"model": MODEL, "execute_delay_ms": 20, "settings": WINDOWS, "levels": levels}
    (tmp_path / "fidelity.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nthroughput (infer/s) on {MODEL}, 20 ms per execution; {tmp_path / 'fidelity.json'}")
    print(f"{'conc':>4} {'perf_analyzer':>14} {'autotune':>10} {'ratio':>6}  p50 us (pa / ours)")
    for level in levels:
        theirs, ours = level["perf_analyzer"], level["autotune"]
        print(
            f"{level['concurrency']:>4} {theirs['throughput']:>14.1f} {ours['throughput']:>10.1f}"
            f" {level['ratio']:>6.3f}  {theirs['p50_us']} / {ours['p50_us']}"
        )

    for level in levels:
        assert abs(level["ratio"] - 1.0) <= AGREEMENT, report
