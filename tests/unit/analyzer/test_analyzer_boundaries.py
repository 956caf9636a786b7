"""The analyzer stays a plain KServe v2 client: importing it loads no module of the server
(its sources never import serve: tests/unit/test_import_boundaries.py); the client overhead
meter reads real processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from analyzer.profiler.overhead import CpuMeter, busy_pct

ROOT = Path(__file__).resolve().parents[3]


def test_importing_the_analyzer_cli_loads_no_serve_module() -> None:
    code = (
        "import sys, analyzer.cli, analyzer.api;"
        "print([m for m in sys.modules if m == 'serve' or m.startswith('serve.')])"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_cpu_meter_sees_this_process_work_and_ignores_vanished_ones() -> None:
    meter = CpuMeter(lambda: [os.getpid(), 2**22 + 12345])
    before = meter.sample()
    assert list(before) == [os.getpid()]
    total = 0
    for i in range(300_000):
        total += i * i
    after = meter.sample()
    assert after[os.getpid()] >= before[os.getpid()]
    assert 0.0 <= busy_pct(before, after, 0.01) <= 100.0
    assert busy_pct(before, after, 0.0) == 0.0
    assert busy_pct({}, after, 1.0) == 0.0
