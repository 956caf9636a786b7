"""What every generated ONNX file shares: the opset, the IR version and the producer name."""

from __future__ import annotations

import onnx
from onnx import helper

OPSET = 17
# IR 8 keeps the files loadable by older onnxruntime builds (e.g. the one inside Triton).
IR_VERSION = 8


def make_model(graph: onnx.GraphProto) -> onnx.ModelProto:
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="autotune-build_model_repository",
    )
    model.ir_version = IR_VERSION
    return model
