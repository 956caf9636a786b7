"""Fixtures shared by the integration and end-to-end tests."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.server_process import RunningServer, start_server, stop_server

PROJECT_ROOT = Path(__file__).resolve().parents[1]
BUNDLED_REPOSITORY = PROJECT_ROOT / "model_repository"


@pytest.fixture(scope="session")
def bundled_repository() -> Path:
    """The project's model_repository with its generated models built (resnet18)."""
    subprocess.run(
        [
            sys.executable,
            str(PROJECT_ROOT / "scripts" / "build_model_repository.py"),
            "--repository",
            str(BUNDLED_REPOSITORY),
        ],
        check=True,
        timeout=600,
    )
    return BUNDLED_REPOSITORY


@pytest.fixture(scope="session")
def repository_copy(bundled_repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private copy of the bundled repository (large model files are linked, not copied)."""
    target = tmp_path_factory.mktemp("repo") / "model_repository"
    shutil.copytree(bundled_repository, target, copy_function=_link_or_copy)
    return target


def _link_or_copy(src: str, dst: str) -> None:
    if Path(src).stat().st_size > 1_000_000:
        Path(dst).symlink_to(src)
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
