"""Writing the best configuration back into a model repository, atomically.

Order matters for a reader who looks at any moment (or a run killed at any moment): the
precision variant's model file is placed first (under a new name, beside the original), then
the previous config.pbtxt is kept as config.pbtxt.bak, then the new config.pbtxt replaces the
old one in one rename. The repository therefore always holds the old config or the new one,
each pointing at a file that exists.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from common.atomic import copy_atomic
from serve.api import CONFIG_FILENAME, write_config

BACKUP_SUFFIX = ".bak"


@dataclass(frozen=True, slots=True)
class WriteBack:
    config_path: Path
    backup_path: Path | None
    model_files: list[Path]


def write_back(
    model_dir: Path,
    config: mc.ModelConfig,
    versions: list[int],
    variant_file: Path | None,
) -> WriteBack:
    """Write `config` as `model_dir/config.pbtxt`, keeping the old one as config.pbtxt.bak.

    `variant_file`, when given, is copied into each served version folder under the name the
    config's `default_model_filename` gives, before the config is written."""
    placed: list[Path] = []
    if variant_file is not None:
        if not config.default_model_filename:
            raise ValueError("a precision variant needs config.default_model_filename")
        for version in versions:
            target = model_dir / str(version) / config.default_model_filename
            copy_atomic(variant_file, target)
            placed.append(target)
    config_path = model_dir / CONFIG_FILENAME
    backup: Path | None = None
    if config_path.exists():
        backup = config_path.with_name(CONFIG_FILENAME + BACKUP_SUFFIX)
        copy_atomic(config_path, backup)
    write_config(config_path, config)
    return WriteBack(config_path, backup, placed)


def copy_model_dir(model_dir: Path, output_repository: Path) -> Path:
    """`--output-repository`: a copy of the model folder to write into instead."""
    target = output_repository / model_dir.name
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(model_dir, target, symlinks=False)
    return target
