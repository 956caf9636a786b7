"""A tuning run killed part way leaves the old or the new config, never a partial one, and
leaves no server behind; running the same command again resumes the same study."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from serve.config.model_config import read_config_file
from tests.e2e.conftest import SLOW_DIGITS_CONFIG, autotune, slow_digits_args

ARGS = slow_digits_args(3)


def _processes_under(folder: Path) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(process.info["cmdline"] or [])
        if str(folder) in cmdline and process.pid != os.getpid():
            found.append(process)
    return found


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_killed_run_keeps_a_whole_config_and_resumes(
    tmp_path: Path, repository_with: Callable[..., Path], sig: int
) -> None:
    repository = repository_with("digits", configs={"digits": SLOW_DIGITS_CONFIG})
    model_dir = repository / "digits"
    log_path = tmp_path / "first-run.log"
    with log_path.open("w") as log:
        run = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tuner",
                *ARGS,
                "--model-repository",
                str(repository),
                "--trials",
                "5",
            ],
            cwd=tmp_path,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "COLUMNS": "200"},
        )
    try:
        deadline = time.monotonic() + 240
        while "trial 1 " not in log_path.read_text():  # two trials told: kill in the third
            assert run.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, "the first trials never finished"
            time.sleep(0.2)
        run.send_signal(sig)
        code = run.wait(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert code != 0
    config = read_config_file(model_dir / "config.pbtxt")  # a whole file, old or new
    assert config.name == "digits"
    assert not [p for p in model_dir.rglob("*.tmp")], "no temporary file is left behind"
    deadline = time.monotonic() + 30
    while _processes_under(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _processes_under(tmp_path) == [], "the tuning server died with the tuner"

    summary_path = tmp_path / "reports" / "digits" / "summary.json"
    assert not summary_path.exists()  # the killed run did not finish
    resumed = autotune(
        tmp_path, *ARGS, "--model-repository", str(repository), "--trials", "4", timeout=600
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    summary = json.loads(summary_path.read_text())
    numbers = [t["number"] for t in summary["trials"]]
    assert numbers[:2] == [0, 1], "the first run's trials are part of the resumed study"
    told = [t for t in summary["trials"] if t["outcome"] is not None]
    assert len(told) >= 4, resumed.stdout
    assert read_config_file(model_dir / "config.pbtxt") != read_config_file(
        model_dir / "config.pbtxt.bak"
    )
