"""ruff and mypy stay clean; run here so CI enforces them. (Which package may import which is
tests/unit/test_import_boundaries.py.)"""

from __future__ import annotations

import re
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


def test_tests_never_read_the_repository_that_the_readme_commands_rewrite() -> None:
    # The README's first command tunes model_repository/ in place; tests read the session's
    # copy of the models as committed (tests.conftest.BUNDLED_REPOSITORY) instead.
    direct = re.compile(r"""(ROOT|parents\[\d\])\s*/\s*["']model_repository["']""")
    offenders = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "tests").rglob("*.py")
        if path.name != "conftest.py" and direct.search(path.read_text())
    ]
    assert offenders == []
