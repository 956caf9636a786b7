"""ruff and mypy stay clean; run here so CI enforces them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_ruff_is_clean() -> None:
    ruff = shutil.which("ruff")
    assert ruff is not None, "ruff is part of the test extra"
    result = subprocess.run([ruff, "check", "."], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_is_clean() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_serve_never_imports_analyzer_or_tuner() -> None:
    offenders = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "serve").rglob("*.py")
        if any(
            line.startswith(("import analyzer", "import tuner", "from analyzer", "from tuner"))
            for line in path.read_text().splitlines()
        )
    ]
    assert offenders == []
