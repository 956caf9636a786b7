"""Helpers for integration tests: scratch repositories and a server per test module."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import BUNDLED_REPOSITORY

RepositoryFactory = Callable[[dict[str, str]], Path]


@pytest.fixture
def make_repository(tmp_path: Path) -> RepositoryFactory:
    """Build a repository whose models reuse a bundled model's files with new configs.

    Keys are model names; values are config.pbtxt texts whose first line is
    `# from: <bundled model>` naming the model whose version folders to copy.
    """

    def build(models: dict[str, str]) -> Path:
        root = tmp_path / "repository"
        root.mkdir(exist_ok=True)
        for name, config in models.items():
            source = config.splitlines()[0].removeprefix("# from:").strip()
            target = root / name
            source_dir = BUNDLED_REPOSITORY / source
            shutil.copytree(source_dir, target, ignore=_version_folders_of(source_dir))
            (target / "config.pbtxt").write_text(config)
        return root

    return build


def _version_folders_of(model_dir: Path) -> Callable[[str, list[str]], list[str]]:
    """A copytree filter keeping only the version folders at the model's top level."""

    def ignore(directory: str, names: list[str]) -> list[str]:
        if Path(directory) == model_dir:
            return [n for n in names if not n.isdigit()]
        return []

    return ignore
