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


def test_a_replaced_file_keeps_its_permissions_and_a_new_one_follows_the_umask(
    tmp_path: Path,
) -> None:
    # A user's config.pbtxt rewritten by the tuner must not turn private (mkstemp makes 0600).
    existing, new, explicit = tmp_path / "config.pbtxt", tmp_path / "new.bin", tmp_path / "x.bin"
    existing.write_text("old")
    existing.chmod(0o664)
    write_text_atomic(existing, "new")
    assert stat.S_IMODE(existing.stat().st_mode) == 0o664
    old_umask = os.umask(0o027)
    try:
        write_bytes_atomic(new, b"x")
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(new.stat().st_mode) == 0o640
    write_bytes_atomic(explicit, b"x", mode=0o600)
    assert stat.S_IMODE(explicit.stat().st_mode) == 0o600


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
