"""`autotune perf -f` writes the CSV the real perf_analyzer writes for the same flags.

Both tools run against our server with the same flags (at the same time: only the file's
shape is compared, not the figures); the headers must be identical and every cell must have
perf_analyzer's form (levels and throughput as doubles, durations as whole microseconds).
"""

from __future__ import annotations

import csv
import re
import subprocess
import sys
from pathlib import Path

import pytest

from analyzer.report.csv_report import GPU_COLUMNS
from tests.support.perf_analyzer import perf_analyzer_path
from tests.support.server_process import RunningServer

DOUBLE = re.compile(r"^\d+(\.\d+)?(e[+-]\d+)?$")
WHOLE = re.compile(r"^\d+$")
QUICK = ["-p", "500", "-s", "50", "-r", "20"]
GPU_CELL = re.compile(r"^(GPU-[^:;]+:[\d.e+-]+;)*$")


def read_csv(path: Path) -> tuple[list[str], list[list[str]]]:
    with path.open(newline="") as handle:
        rows = list(csv.reader(handle))
    return rows[0], rows[1:]


@pytest.mark.parametrize(
    "flags",
    [
        ["--concurrency-range", "1:2", "--percentile", "75", "--verbose-csv"],
        ["--request-rate-range", "50:100:50", "--verbose-csv"],
        ["--concurrency-range", "1", "--verbose-csv", "--collect-metrics", "--metrics-url", "{}"],
    ],
    ids=["concurrency-percentile", "request-rate", "collect-metrics"],
)
def test_same_csv_as_perf_analyzer(server: RunningServer, tmp_path: Path, flags: list[str]) -> None:
    ours_path, theirs_path = tmp_path / "ours.csv", tmp_path / "theirs.csv"
    flags = [server.metrics_url + "/metrics" if flag == "{}" else flag for flag in flags]
    common = ["-m", "simple", "-u", server.url, *QUICK, *flags]
    our_command = [sys.executable, "-c", "from tuner.cli import main; main()", "perf"]
    ours = subprocess.Popen(
        [*our_command, *common, "-f", str(ours_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    theirs = subprocess.run(
        [str(perf_analyzer_path()), *common, "-f", str(theirs_path)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    _, our_stderr = ours.communicate(timeout=180)
    assert theirs.returncode == 0, theirs.stdout + theirs.stderr
    assert ours.returncode == 0, our_stderr
    our_header, our_rows = read_csv(ours_path)
    their_header, their_rows = read_csv(theirs_path)
    assert our_header == their_header
    assert sorted(row[0] for row in our_rows) == sorted(row[0] for row in their_rows)
    for row in our_rows:
        assert len(row) == len(our_header)
        assert DOUBLE.match(row[0]) and DOUBLE.match(row[1]), row
        durations = (
            row[2 : len(row) - len(GPU_COLUMNS)] if "--collect-metrics" in flags else row[2:]
        )
        assert all(WHOLE.match(cell) for cell in durations), row
        if "--collect-metrics" in flags:
            # Per GPU `uuid:value;`; empty on a machine without a GPU (as perf_analyzer's).
            their_cells = {tuple(r[-len(GPU_COLUMNS) :]) for r in their_rows}
            assert all(GPU_CELL.match(cell) for cell in row[-len(GPU_COLUMNS) :]), row
            if their_cells == {("",) * len(GPU_COLUMNS)}:
                assert row[-len(GPU_COLUMNS) :] == [""] * len(GPU_COLUMNS)
