"""A pipeline's write-back: every composing model's config.pbtxt, all or none."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from serve.api import config_to_text
from tuner.writeback import BACKUP_SUFFIX, ModelWrite, WriteBackError, write_back_all

MODELS = ("step_a", "step_b", "step_c")


def _config(name: str, count: int) -> mc.ModelConfig:
    config = mc.ModelConfig(name=name, backend="onnxruntime", max_batch_size=8)
    config.instance_group.add(count=count, kind=mc.ModelInstanceGroup.KIND_CPU)
    return config


def _repository(root: Path) -> dict[str, str]:
    """Three model folders with a config each; their texts."""
    texts = {}
    for name in MODELS:
        folder = root / name
        (folder / "1").mkdir(parents=True)
        (folder / "1" / "model.onnx").write_bytes(b"onnx")
        texts[name] = config_to_text(_config(name, 1))
        (folder / "config.pbtxt").write_text(texts[name])
    return texts


def _writes(root: Path) -> list[ModelWrite]:
    return [ModelWrite(root / name, _config(name, 3), [1]) for name in MODELS]


def _configs(root: Path) -> dict[str, str]:
    return {name: (root / name / "config.pbtxt").read_text() for name in MODELS}


def _leftovers(root: Path) -> list[str]:
    return sorted(p.name for name in MODELS for p in (root / name).glob(".config.pbtxt.*"))


def test_every_config_is_written_and_the_old_ones_kept(tmp_path: Path) -> None:
    before = _repository(tmp_path)
    written = write_back_all(_writes(tmp_path))
    assert [w.config_path for w in written] == [tmp_path / m / "config.pbtxt" for m in MODELS]
    for name in MODELS:
        assert _configs(tmp_path)[name] == config_to_text(_config(name, 3))
        backup = tmp_path / name / f"config.pbtxt{BACKUP_SUFFIX}"
        assert backup.read_text() == before[name]
    assert _leftovers(tmp_path) == []


def test_a_failure_on_the_second_rename_leaves_every_config_unchanged(tmp_path: Path) -> None:
    before = _repository(tmp_path)
    calls: list[Path] = []

    def failing_second(source: Path, target: Path) -> None:
        calls.append(target)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        os.replace(source, target)

    with pytest.raises(WriteBackError, match=r"step_b.*nothing was written back") as caught:
        write_back_all(_writes(tmp_path), rename=failing_second)
    assert len(calls) == 2  # the third was never tried
    assert "1 config(s) already replaced were restored" in str(caught.value)
    assert _configs(tmp_path) == before
    assert _leftovers(tmp_path) == []


def test_a_failure_on_the_first_rename_leaves_every_config_unchanged(tmp_path: Path) -> None:
    before = _repository(tmp_path)

    def failing(source: Path, target: Path) -> None:
        raise PermissionError(13, "Permission denied")

    with pytest.raises(WriteBackError, match="step_a"):
        write_back_all(_writes(tmp_path), rename=failing)
    assert _configs(tmp_path) == before
    assert _leftovers(tmp_path) == []


def test_a_model_without_a_config_before_has_none_after_a_failure(tmp_path: Path) -> None:
    before = _repository(tmp_path)
    (tmp_path / "step_a" / "config.pbtxt").unlink()
    calls: list[Path] = []

    def failing_second(source: Path, target: Path) -> None:
        calls.append(target)
        if len(calls) == 2:
            raise OSError(5, "Input/output error")
        os.replace(source, target)

    with pytest.raises(WriteBackError):
        write_back_all(_writes(tmp_path), rename=failing_second)
    assert not (tmp_path / "step_a" / "config.pbtxt").exists()
    assert (tmp_path / "step_b" / "config.pbtxt").read_text() == before["step_b"]


def _failing_on_step_c(source: Path, target: Path) -> None:
    """A rename that fails for the last model's config (the disk filled up)."""
    if target.parent.name == "step_c":
        raise OSError(28, "No space left on device")
    os.replace(source, target)


def test_a_variant_file_placed_for_a_failed_write_back_is_removed(tmp_path: Path) -> None:
    _repository(tmp_path)
    variant = tmp_path / "built.int8.onnx"
    variant.write_bytes(b"int8")
    writes = _writes(tmp_path)
    tuned = _config("step_a", 2)
    tuned.default_model_filename = "model.int8.onnx"
    writes[0] = ModelWrite(tmp_path / "step_a", tuned, [1], variant)

    with pytest.raises(WriteBackError):
        write_back_all(writes, rename=_failing_on_step_c)
    assert not (tmp_path / "step_a" / "1" / "model.int8.onnx").exists()
    assert (tmp_path / "step_a" / "1" / "model.onnx").read_bytes() == b"onnx"


def test_files_the_config_expects_in_the_model_folder_are_placed_with_it(tmp_path: Path) -> None:
    _repository(tmp_path)
    table = tmp_path / "built.flatbuffers"
    table.write_bytes(b"ranges")
    writes = _writes(tmp_path)
    writes[1] = ModelWrite(
        tmp_path / "step_b", _config("step_b", 2), [1], None, {"tensorrt/calibration.flb": table}
    )
    (written_b,) = write_back_all(writes)[1:2]
    placed = tmp_path / "step_b" / "tensorrt" / "calibration.flb"
    assert placed.read_bytes() == b"ranges" and written_b.model_files == [placed]


def test_a_folder_file_placed_for_a_failed_write_back_is_removed(tmp_path: Path) -> None:
    _repository(tmp_path)
    table = tmp_path / "built.flatbuffers"
    table.write_bytes(b"ranges")
    writes = _writes(tmp_path)
    writes[0] = ModelWrite(
        tmp_path / "step_a", _config("step_a", 2), [1], None, {"tensorrt/calibration.flb": table}
    )

    with pytest.raises(WriteBackError):
        write_back_all(writes, rename=_failing_on_step_c)
    assert not (tmp_path / "step_a" / "tensorrt" / "calibration.flb").exists()


def test_a_folder_file_outside_the_model_folder_is_refused(tmp_path: Path) -> None:
    before = _repository(tmp_path)
    table = tmp_path / "built.flatbuffers"
    table.write_bytes(b"ranges")
    writes = _writes(tmp_path)
    writes[0] = ModelWrite(
        tmp_path / "step_a", _config("step_a", 2), [1], None, {"../step_b/x": table}
    )
    with pytest.raises(WriteBackError, match="not inside"):
        write_back_all(writes)
    assert _configs(tmp_path) == before
    assert not (tmp_path / "step_b" / "x").exists()
