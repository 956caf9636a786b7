"""common/: atomic writes leave the old file or the new one, never a partial or a stray
temporary file; the usable CPU count."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from common.atomic import copy_atomic, publish, write_bytes_atomic, write_text_atomic
from common.cpu import usable_cpu_count


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_write_text_atomic_replaces_and_creates_folders(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "file.txt"
    write_text_atomic(target, "first\n")
    write_text_atomic(target, "sécond\n")
    assert target.read_text(encoding="utf-8") == "sécond\n"
    assert _names(target.parent) == ["file.txt"]


def test_mode_is_applied_only_when_asked(tmp_path: Path) -> None:
    private, shared = tmp_path / "private.bin", tmp_path / "shared.bin"
    write_bytes_atomic(private, b"x")
    write_bytes_atomic(shared, b"x", mode=0o644)
    assert stat.S_IMODE(private.stat().st_mode) == 0o600  # mkstemp's, as before
    assert stat.S_IMODE(shared.stat().st_mode) == 0o644


def test_copy_atomic_copies_and_a_failure_keeps_the_old_file(tmp_path: Path) -> None:
    source, target = tmp_path / "source", tmp_path / "target"
    source.write_bytes(os.urandom(3 << 20))
    target.write_bytes(b"old")
    copy_atomic(source, target)
    assert target.read_bytes() == source.read_bytes()
    with pytest.raises(FileNotFoundError):
        copy_atomic(tmp_path / "missing", target)
    assert target.read_bytes() == source.read_bytes()
    assert _names(tmp_path) == ["source", "target"]


def test_publish_moves_a_built_file_into_place(tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    built, final = scratch / "model.onnx", tmp_path / "model.onnx"
    built.write_bytes(b"model")
    publish(built, final)
    assert final.read_bytes() == b"model"
    assert not built.exists()


def test_usable_cpu_count_is_positive() -> None:
    assert 1 <= usable_cpu_count() <= (os.cpu_count() or 1)
