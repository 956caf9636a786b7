"""stateful_sum/1/model.onnx: a model with implicit state for the sequence batcher.

OUTPUT = STATE_IN + INPUT and STATE_OUT = OUTPUT, FP32 [batch, 1] each: with
sequence_batching.state mapping STATE_OUT back to STATE_IN, OUTPUT is the running sum of the
sequence's inputs while the server, not the client, carries the sum between requests.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from builders.onnx_model import make_model

Writer = Callable[[Path, bytes], None]


def stateful_sum_onnx() -> onnx.ModelProto:
    shape: list[int | str] = ["batch", 1]
    inputs = [
        helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)
        for name in ("INPUT", "STATE_IN")
    ]
    outputs = [
        helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)
        for name in ("OUTPUT", "STATE_OUT")
    ]
    nodes = [
        helper.make_node("Add", ["STATE_IN", "INPUT"], ["OUTPUT"]),
        helper.make_node("Identity", ["OUTPUT"], ["STATE_OUT"]),
    ]
    model = make_model(helper.make_graph(nodes, "stateful_sum", inputs, outputs))
    onnx.checker.check_model(model)
    return model


def build_stateful_sum(model_dir: Path, force: bool, write: Writer) -> list[Path]:
    path = model_dir / "1" / "model.onnx"
    if path.exists() and not force:
        return []
    path.parent.mkdir(parents=True, exist_ok=True)
    write(path, stateful_sum_onnx().SerializeToString())
    return [path]
