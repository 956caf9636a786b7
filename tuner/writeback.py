"""Writing the best configuration back into a model repository, atomically.

Order matters for a reader who looks at any moment (or a run killed at any moment): the
precision variant's model file (and any file its config expects in the model's folder, such as
trt_int8's calibration table) is placed first (under a new name, beside the original), then
the previous config.pbtxt is kept as config.pbtxt.bak, then the new config.pbtxt replaces the
old one in one rename. The repository therefore always holds the old config or the new one,
each pointing at a file that exists.

A pipeline writes several models' configs ALL OR NONE (`write_back_all`): every new config is
first written in full beside its target and fsynced, and every old one kept as .bak; only then
are they renamed into place, one after the other. When a rename fails, the configs already
replaced are restored from their .bak (and the staged files removed) before the error is
raised, so the repository ends with every new config or with none.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from common.atomic import copy_atomic, fsync_dir
from serve.api import CONFIG_FILENAME, config_to_text
from tuner.errors import TunerError

BACKUP_SUFFIX = ".bak"

Rename = Callable[[Path, Path], None]


class WriteBackError(TunerError):
    """The configs could not all be written; none of them was changed."""


@dataclass(frozen=True, slots=True)
class WriteBack:
    """What a write-back wrote: the config, its backup (None when there was no config
    before) and the model files placed."""

    config_path: Path
    backup_path: Path | None
    model_files: list[Path]


@dataclass(frozen=True, slots=True)
class ModelWrite:
    """One model's part of a write-back: its folder, the config to write, the versions it
    serves and the precision variant's file to place (None: the config names no new file)."""

    model_dir: Path
    config: mc.ModelConfig
    versions: list[int]
    variant_file: Path | None = None
    # Files the config expects inside the model's folder (relative path -> source), e.g.
    # trt_int8's calibration table.
    folder_files: Mapping[str, Path] = field(default_factory=dict)


def write_back(
    model_dir: Path,
    config: mc.ModelConfig,
    versions: list[int],
    variant_file: Path | None,
    folder_files: Mapping[str, Path] | None = None,
) -> WriteBack:
    """Write `config` as `model_dir/config.pbtxt`, keeping the old one as config.pbtxt.bak.

    `variant_file`, when given, is copied into each served version folder under the name the
    config's `default_model_filename` gives, and `folder_files` into the model's folder,
    before the config is written."""
    write = ModelWrite(model_dir, config, versions, variant_file, dict(folder_files or {}))
    return write_back_all([write])[0]


def write_back_all(writes: Sequence[ModelWrite], *, rename: Rename = os.replace) -> list[WriteBack]:
    """Write every model's config, all or none (see the module docstring); `rename` moves a
    staged config into place (a parameter so that a test can make one fail). Raises
    WriteBackError naming the model whose config could not be written."""
    placed: list[list[Path]] = []
    created: list[Path] = []  # variant files that did not exist before: removed on failure
    staged: list[Path] = []
    try:
        for write in writes:
            placed.append(_place_variant(write, created))
        for write in writes:
            staged.append(_stage(write))
        backups = [_keep_backup(write.model_dir / CONFIG_FILENAME) for write in writes]
    except (OSError, ValueError) as exc:
        _discard(staged, created)
        raise WriteBackError(f"nothing was written back: {exc}") from exc
    replaced: list[int] = []
    for index, (write, source) in enumerate(zip(writes, staged, strict=True)):
        target = write.model_dir / CONFIG_FILENAME
        try:
            rename(source, target)
        except OSError as exc:
            _restore(writes, backups, replaced)
            _discard(staged[index:], created)
            raise WriteBackError(
                f"could not write {target} ({exc}); the "
                f"{len(replaced)} config(s) already replaced were restored from their "
                f"{BACKUP_SUFFIX}: nothing was written back"
            ) from exc
        replaced.append(index)
    for write in writes:
        fsync_dir(write.model_dir)
    return [
        WriteBack(write.model_dir / CONFIG_FILENAME, backup, files)
        for write, backup, files in zip(writes, backups, placed, strict=True)
    ]


def _place_variant(write: ModelWrite, created: list[Path]) -> list[Path]:
    targets = _place_folder_files(write, created)
    if write.variant_file is None:
        return targets
    filename = write.config.default_model_filename
    if not filename:
        raise ValueError("a precision variant needs config.default_model_filename")
    for version in write.versions:
        target = write.model_dir / str(version) / filename
        existed = target.exists()
        copy_atomic(write.variant_file, target)
        if not existed:
            created.append(target)
        targets.append(target)
    return targets


def _place_folder_files(write: ModelWrite, created: list[Path]) -> list[Path]:
    targets = []
    for relative, source in write.folder_files.items():
        target = write.model_dir / relative
        if not target.resolve().is_relative_to(write.model_dir.resolve()):
            raise ValueError(f"{relative} is not inside {write.model_dir}")
        target.parent.mkdir(parents=True, exist_ok=True)
        existed = target.exists()
        copy_atomic(source, target)
        if not existed:
            created.append(target)
        targets.append(target)
    return targets


def _stage(write: ModelWrite) -> Path:
    """The new config in full beside its target, fsynced, with the target's permissions."""
    target = write.model_dir / CONFIG_FILENAME
    fd, name = tempfile.mkstemp(prefix=f".{CONFIG_FILENAME}.", suffix=".tmp", dir=write.model_dir)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(config_to_text(write.config).encode("utf-8"))
            out.flush()
            os.fsync(out.fileno())
        mode = target.stat().st_mode & 0o7777 if target.exists() else 0o644
        os.chmod(name, mode)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
    return Path(name)


def _keep_backup(config_path: Path) -> Path | None:
    if not config_path.exists():
        return None
    backup = config_path.with_name(CONFIG_FILENAME + BACKUP_SUFFIX)
    copy_atomic(config_path, backup)
    return backup


def _restore(
    writes: Sequence[ModelWrite], backups: Sequence[Path | None], replaced: Sequence[int]
) -> None:
    for index in replaced:
        target = writes[index].model_dir / CONFIG_FILENAME
        backup = backups[index]
        if backup is None:
            target.unlink(missing_ok=True)  # there was none before
        else:
            copy_atomic(backup, target)


def _discard(staged: Sequence[Path], created: Sequence[Path]) -> None:
    for path in [*staged, *created]:
        path.unlink(missing_ok=True)


def copy_model_dir(model_dir: Path, output_repository: Path) -> Path:
    """`--output-repository`: a copy of the model folder to write into instead."""
    target = output_repository / model_dir.name
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(model_dir, target, symlinks=False)
    return target
