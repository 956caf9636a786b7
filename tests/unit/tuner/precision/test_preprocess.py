"""Quantization pre-processing leaves nothing in the tuner's working directory."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from tuner.precision.preprocess import preprocess_for_quantization


def _two_unnamed_lengths_model(path: Path) -> None:
    """Add of inputs whose dims have different symbols: onnxruntime's symbolic shape inference
    stops there unless it may merge them (it then writes its partial model into the cwd)."""
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["X", "Y"], ["S"]),
            helper.make_node("Mul", ["S", "W"], ["Z"]),
        ],
        "g",
        [
            helper.make_tensor_value_info("X", TensorProto.FLOAT, ["a"]),
            helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["b"]),
        ],
        [helper.make_tensor_value_info("Z", TensorProto.FLOAT, None)],
        [helper.make_tensor("W", TensorProto.FLOAT, [4], [1, 2, 3, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


def test_pre_processing_writes_only_its_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "model.onnx"
    _two_unnamed_lengths_model(source)
    workdir = tmp_path / "workdir"
    (workdir / "scratch").mkdir(parents=True)
    monkeypatch.chdir(workdir)

    # Relative, as the variant cache's default folder is: the child runs elsewhere.
    preprocess_for_quantization(source, Path("scratch") / "model.pre.onnx")

    assert list(workdir.iterdir()) == [workdir / "scratch"]
    onnx.checker.check_model(onnx.load(str(workdir / "scratch" / "model.pre.onnx")))
