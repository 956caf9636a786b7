"""Two `autotune` workers on one study in a real PostgreSQL server, and optuna-dashboard
opening that study: the set-up docs/tuner.md ("Several workers on one study") describes.

The server is Debian's PostgreSQL, started by scripts/postgres.sh in a private folder on a free
loopback port (the script installs the package when it is missing; scripts/run_tests.sh does so
before the tests), and stopped and removed at teardown."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import optuna
import pytest
from optuna.trial import FrozenTrial, TrialState

from tests.conftest import PROJECT_ROOT

SCRIPT = PROJECT_ROOT / "scripts" / "postgres.sh"
STUDY = "shared-simple"
# The server's set-up installs Debian's package when it is missing (scripts/run_tests.sh does
# that before the tests): minutes, within the first test's time.
pytestmark = pytest.mark.timeout(900)
TRIALS = 4


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _script(*args: str, timeout: float = 120) -> str:
    done = subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"postgres.sh {' '.join(args)}:\n{done.stdout}{done.stderr}"
    return done.stdout.strip()


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    """The storage URL of a private PostgreSQL server, stopped and removed at teardown."""
    # The server runs as the unprivileged `postgres` user when the tests run as root: its
    # folder sits in a fresh temporary folder that user can pass through (pytest's are private).
    root = Path(tempfile.mkdtemp(prefix="autotune-postgres-"))
    root.chmod(0o711)
    folder = root / "server"
    try:
        # Installing Debian's package, when missing, takes minutes: hence the long timeout.
        yield _script("start", str(folder), str(_free_port()), timeout=900)
    finally:
        try:
            if (folder / "data" / "PG_VERSION").exists():
                _script("stop", str(folder))
        finally:
            shutil.rmtree(root, ignore_errors=True)


@dataclass(frozen=True)
class SharedStudy:
    url: str
    workers: list[subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def shared_study(
    postgres_url: str, tmp_path_factory: pytest.TempPathFactory, bundled_repository: Path
) -> SharedStudy:
    """Two workers started together on one study, each with its own report folder."""
    work = tmp_path_factory.mktemp("workers")
    repository = work / "model_repository"
    shutil.copytree(bundled_repository / "simple", repository / "simple")
    command = [
        sys.executable,
        "-m",
        "tuner",
        "--latency-p95",
        "5ms",
        "-m",
        "simple",
        "--model-repository",
        str(repository),
        "--trials",
        str(TRIALS),
        "--precision",
        "fp32",
        "--measurement-interval",
        "100",
        "--remeasure-top",
        "0",
        "--dry-run",
        "--storage",
        postgres_url,
        "--study-name",
        STUDY,
    ]
    processes = [
        subprocess.Popen(
            [*command, "--report-dir", str(work / f"reports-{n}"), "--seed", str(n)],
            cwd=work,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in (1, 2)
    ]
    finished = []
    try:
        for process in processes:
            out, err = process.communicate(timeout=240)
            finished.append(subprocess.CompletedProcess(process.args, process.returncode, out, err))
    finally:
        for process in processes:
            if process.poll() is None:
                process.terminate()  # autotune stops its tuning server on SIGTERM
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
    return SharedStudy(postgres_url, finished)


def test_two_workers_share_one_study_without_losing_or_repeating_a_trial(
    shared_study: SharedStudy,
) -> None:
    for worker in shared_study.workers:
        assert worker.returncode == 0, worker.stdout + worker.stderr
    trials = optuna.load_study(study_name=STUDY, storage=shared_study.url).trials
    assert not [t.number for t in trials if t.state == TrialState.RUNNING], "a trial was lost"
    failed = [t for t in trials if t.state == TrialState.FAIL and not _measured(t)]
    assert all(t.user_attrs.get("surplus") for t in failed), [t.user_attrs for t in failed]
    measured = [t for t in trials if _measured(t) and "reused_from" not in t.user_attrs]
    assert len(measured) == TRIALS, _listing(trials)
    keys = [t.user_attrs["key"] for t in measured]
    assert len(set(keys)) == len(keys), f"a candidate was measured twice:\n{_listing(trials)}"
    for reused in (t for t in trials if "reused_from" in t.user_attrs):
        source = trials[reused.user_attrs["reused_from"]]
        assert source.user_attrs["key"] == reused.user_attrs["key"]
    workers = {t.user_attrs["worker"]["id"] for t in measured}
    assert len(workers) == 2, f"one worker measured everything:\n{_listing(trials)}"


def test_optuna_dashboard_opens_the_study(shared_study: SharedStudy, tmp_path: Path) -> None:
    dashboard = Path(sysconfig.get_path("scripts")) / "optuna-dashboard"
    port = _free_port()
    log = (tmp_path / "dashboard.log").open("w")
    process = subprocess.Popen(
        [str(dashboard), shared_study.url, "--host", "127.0.0.1", "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        studies = _get_when_up(f"{base}/api/studies", process.poll, tmp_path / "dashboard.log")
        study_ids = {s["study_name"]: s["study_id"] for s in studies["study_summaries"]}
        assert STUDY in study_ids, studies
        detail = httpx.get(f"{base}/api/studies/{study_ids[STUDY]}", timeout=30)
        assert detail.status_code == 200, detail.text
        trials = detail.json()["trials"]
        assert len(trials) == len(
            optuna.load_study(study_name=STUDY, storage=shared_study.url).trials
        )
        assert any(t["state"] == "Complete" for t in trials), trials
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def _get_when_up(url: str, exited: Callable[[], int | None], log: Path) -> dict:
    deadline = time.monotonic() + 60
    while True:
        try:
            response = httpx.get(url, timeout=10)
            if response.status_code == 200:
                return dict(response.json())
        except httpx.TransportError:
            pass
        if exited() is not None or time.monotonic() > deadline:
            raise AssertionError(f"optuna-dashboard did not answer {url}:\n{log.read_text()}")
        time.sleep(0.2)


def _measured(trial: FrozenTrial) -> bool:
    """Whether the trial holds an outcome its worker told (a measurement, or a reuse of one)."""
    return "outcome" in trial.user_attrs and trial.state != TrialState.RUNNING


def _listing(trials: list[FrozenTrial]) -> str:
    return "\n".join(
        f"{t.number} {t.state.name} {t.user_attrs.get('key')} "
        f"worker={t.user_attrs.get('worker', {}).get('id')} "
        f"reused_from={t.user_attrs.get('reused_from')} surplus={t.user_attrs.get('surplus')} "
        f"outcome={str(t.user_attrs.get('outcome'))[:300]}"
        for t in trials
    )
