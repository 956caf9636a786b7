"""The analyzer stays a plain KServe v2 client: it never imports the server package; the
client overhead meter reads real processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from analyzer.profiler.overhead import CpuMeter, busy_pct

ROOT = Path(__file__).resolve().parents[2]


def test_analyzer_sources_never_import_serve() -> None:
    offenders = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "analyzer").rglob("*.py")
        if any(
            line.strip().startswith(("import serve", "from serve"))
            for line in path.read_text().splitlines()
        )
    ]
    assert offenders == []


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
