"""A tuning run SIGKILLed again and again at seeded moments (during start-up, preparation,
trials): after every kill the model's config.pbtxt is whole (the old or a new one) with no
temporary file beside it, the study keeps every trial it had finished, and the next run
resumes it; the last run, left alone, finishes the study and writes the result."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from serve.config.model_config import read_config_file
from tests.e2e.conftest import SLOW_DIGITS_CONFIG, autotune, slow_digits_args

KILLS = 4
ARGS = (*slow_digits_args(5), "--trials", "6")


def _finished_trials(reports: Path) -> set[int]:
    """Numbers of the trials the study holds as finished (COMPLETE), over its SQLite files."""
    finished: set[int] = set()
    for database in reports.rglob("*.db"):
        with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as db:
            try:
                rows = db.execute("SELECT number FROM trials WHERE state = 'COMPLETE'")
            except sqlite3.OperationalError:  # created, no table yet
                continue
            finished |= {number for (number,) in rows}
    return finished


def test_repeated_kills_lose_no_trial_and_never_tear_the_config(
    tmp_path: Path, repository_with: Callable[..., Path]
) -> None:
    repository = repository_with("digits", configs={"digits": SLOW_DIGITS_CONFIG})
    model_dir = repository / "digits"
    command = [sys.executable, "-m", "tuner", *ARGS, "--model-repository", str(repository)]
    rng = random.Random(11)
    finished: set[int] = set()
    for kill in range(KILLS):
        log_path = tmp_path / f"run-{kill}.log"
        with log_path.open("w") as log:
            run = subprocess.Popen(
                command, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ)
            )
        time.sleep(rng.uniform(2.0, 12.0))
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=60)
        config = read_config_file(model_dir / "config.pbtxt")  # whole: it parses
        assert config.name == "digits"
        # a kill inside the write leaves only the writer's hidden temporary file, which no
        # repository reads
        leftovers = [p.name for p in model_dir.rglob("*.tmp")]
        assert all(name.startswith(".config.pbtxt.") for name in leftovers), leftovers
        now = _finished_trials(tmp_path / "reports")
        assert finished <= now, f"kill {kill} lost finished trials {sorted(finished - now)}"
        finished = now
    resumed = autotune(tmp_path, *ARGS, "--model-repository", str(repository), timeout=600)
    assert resumed.returncode in (0, 3), resumed.stdout + resumed.stderr
    assert finished <= _finished_trials(tmp_path / "reports")
    assert (tmp_path / "reports" / "digits" / "summary.json").is_file()
