"""Atomic file writes: a reader (or a process killed at any moment) sees the old content or
the new one, never a partial file.

Each writes a temporary file beside the target, fsyncs it, renames it over the target and
fsyncs the folder, so the rename itself survives a crash. The temporary file is removed when
anything fails.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

_CHUNK = 1 << 20


def write_bytes_atomic(path: Path, data: bytes, *, mode: int | None = None) -> None:
    """Write `data` as `path`. The file keeps the permissions of the one it replaces (a new
    one gets what `open` would give it under the process's umask); `mode` sets them instead."""
    _replace(path, lambda out: out.write(data), mode)


def write_text_atomic(path: Path, text: str, *, mode: int | None = None) -> None:
    """Write `text` (UTF-8) as `path`."""
    write_bytes_atomic(path, text.encode("utf-8"), mode=mode)


def copy_atomic(source: Path, target: Path, *, mode: int | None = None) -> None:
    """Copy `source` to `target`, which is then absent or old, or complete."""

    def fill(out: BinaryIO) -> None:
        with source.open("rb") as src:
            shutil.copyfileobj(src, out, length=_CHUNK)

    _replace(target, fill, mode)


def publish(built: Path, final: Path) -> None:
    """Move a file built elsewhere on the same file system into place: fsync it, rename it
    over `final`, fsync the folder."""
    with built.open("rb") as handle:
        os.fsync(handle.fileno())
    os.replace(built, final)
    fsync_dir(final.parent)


def fsync_dir(path: Path) -> None:
    """Make a rename (or a new entry) in folder `path` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _replace(path: Path, fill: Callable[[BinaryIO], object], mode: int | None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            fill(out)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp_name, mode if mode is not None else _mode_for(path))
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def _mode_for(path: Path) -> int:
    """The permissions `path` has now, or those a new file gets (mkstemp's are always 0600)."""
    try:
        return path.stat().st_mode & 0o7777
    except FileNotFoundError:
        return 0o666 & ~_umask()


def _umask() -> int:
    # Read, not set-and-restore: os.umask() changes it for every thread in between.
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022
