"""Fixtures shared by the tests, and the bundled models as committed (BUNDLED_REPOSITORY)."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from serve.config.model_config import CONFIG_FILENAME
from tests.support.server_process import RunningServer, start_server, stop_server
from tuner.candidate import FILE_PRECISIONS
from tuner.writeback import BACKUP_SUFFIX

PROJECT_ROOT = Path(__file__).resolve().parents[1]
SOURCE_REPOSITORY = PROJECT_ROOT / "model_repository"
"""The project's model repository. The README's commands build into it and tune it (tuning
rewrites its configs), so tests never read it: they read BUNDLED_REPOSITORY."""

# Processes the tests start that import test modules (worker scripts) find the session's copy
# through the environment; only the session that made it removes it.
_COPY_VARIABLE = "AUTOTUNE_TESTS_BUNDLED_REPOSITORY"
_OWN_COPY = _COPY_VARIABLE not in os.environ
if _OWN_COPY:
    _copy_root = Path(tempfile.mkdtemp(prefix="autotune-tests-"))
    os.environ[_COPY_VARIABLE] = str(_copy_root / "model_repository")

BUNDLED_REPOSITORY = Path(os.environ[_COPY_VARIABLE])
"""The bundled models as committed, for this test session: a copy of SOURCE_REPOSITORY made
when the session starts, without what the tuner writes there (config.pbtxt.bak, precision
variants) and with the committed config.pbtxt (from git) of every model the tuner rewrote.
Large model files are links. The `bundled_repository` fixture adds the generated models."""


def pytest_configure(config: pytest.Config) -> None:
    sync_committed(SOURCE_REPOSITORY, BUNDLED_REPOSITORY)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _OWN_COPY:
        shutil.rmtree(BUNDLED_REPOSITORY.parent, ignore_errors=True)


def sync_committed(source: Path, target: Path) -> None:
    """Copy into `target` the files of `source` it lacks, leaving out what the tuner writes; a
    model whose config the tuner rewrote (it kept the old one as config.pbtxt.bak) gets its
    committed config.pbtxt instead."""
    shutil.copytree(source, target, ignore=_tuner_output, copy_function=_add, dirs_exist_ok=True)
    for backup in sorted(source.glob(f"*/{CONFIG_FILENAME}{BACKUP_SUFFIX}")):
        model = backup.parent.name
        (target / model / CONFIG_FILENAME).write_bytes(committed_config(model))


def _tuner_output(directory: str, names: list[str]) -> list[str]:
    variants = tuple(f".{precision}." for precision in FILE_PRECISIONS)  # model.int8.onnx
    return [n for n in names if n.endswith(BACKUP_SUFFIX) or any(v in n for v in variants)]


def _add(src: str, dst: str) -> None:
    if not Path(dst).exists():
        _link_or_copy(src, dst)


def committed_config(model: str) -> bytes:
    """The bundled model's config.pbtxt as committed (git's HEAD)."""
    relative = (SOURCE_REPOSITORY / model / CONFIG_FILENAME).relative_to(PROJECT_ROOT).as_posix()
    try:
        shown = subprocess.run(
            ["git", "show", f"HEAD:{relative}"], cwd=PROJECT_ROOT, capture_output=True, timeout=60
        )
    except OSError as exc:
        shown = subprocess.CompletedProcess([], 1, b"", str(exc).encode())
    if shown.returncode != 0:
        raise pytest.UsageError(
            f"{relative} was rewritten by the tuner (a {CONFIG_FILENAME}{BACKUP_SUFFIX} is beside "
            f"it) and git cannot give the committed one: {shown.stderr.decode().strip()}"
        )
    return shown.stdout


@pytest.fixture(scope="session")
def bundled_repository() -> Path:
    """BUNDLED_REPOSITORY with the generated models (resnet18) built. Parallel test workers
    (pytest-xdist) share the copy: the first builds while the others wait on its lock."""
    with open(BUNDLED_REPOSITORY.parent / "build.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        subprocess.run(
            [
                sys.executable,
                str(PROJECT_ROOT / "scripts" / "build_model_repository.py"),
                "--repository",
                str(SOURCE_REPOSITORY),
            ],
            check=True,
            timeout=600,
        )
        sync_committed(SOURCE_REPOSITORY, BUNDLED_REPOSITORY)
    return BUNDLED_REPOSITORY


@pytest.fixture(scope="session")
def repository_copy(bundled_repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private copy of the bundled repository (large model files are linked, not copied)."""
    target = tmp_path_factory.mktemp("repo") / "model_repository"
    shutil.copytree(bundled_repository, target, copy_function=_link_or_copy)
    return target


def _link_or_copy(src: str, dst: str) -> None:
    if Path(src).stat().st_size > 1_000_000:
        Path(dst).symlink_to(Path(src).resolve())
    else:
        shutil.copy2(src, dst)


@pytest.fixture(scope="session")
def server(
    repository_copy: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    """One server on the bundled models for the whole session."""
    log_path = tmp_path_factory.mktemp("server") / "server.log"
    running = start_server(repository_copy, log_path)
    try:
        yield running
    finally:
        stop_server(running)
