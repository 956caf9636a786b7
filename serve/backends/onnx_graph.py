"""A config's blanks completed from an ONNX graph (inputs, outputs, batching), as Triton's
onnxruntime backend does. Reading the graph parses the whole model file (tens of MB for a
transformer) and importing onnx takes a while, so the backend imports this module only when
the config leaves something to complete."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx
from tritonclient.grpc import model_config_pb2 as mc

from serve.config.tensor_completion import FoundTensor, complete_tensors
from serve.errors import ServeError

# ONNX element types -> config data types.
_ONNX_TO_CONFIG: dict[int, int] = {
    onnx.TensorProto.BOOL: mc.TYPE_BOOL,
    onnx.TensorProto.UINT8: mc.TYPE_UINT8,
    onnx.TensorProto.UINT16: mc.TYPE_UINT16,
    onnx.TensorProto.UINT32: mc.TYPE_UINT32,
    onnx.TensorProto.UINT64: mc.TYPE_UINT64,
    onnx.TensorProto.INT8: mc.TYPE_INT8,
    onnx.TensorProto.INT16: mc.TYPE_INT16,
    onnx.TensorProto.INT32: mc.TYPE_INT32,
    onnx.TensorProto.INT64: mc.TYPE_INT64,
    onnx.TensorProto.FLOAT16: mc.TYPE_FP16,
    onnx.TensorProto.FLOAT: mc.TYPE_FP32,
    onnx.TensorProto.DOUBLE: mc.TYPE_FP64,
    onnx.TensorProto.STRING: mc.TYPE_STRING,
    onnx.TensorProto.BFLOAT16: mc.TYPE_BF16,
}


def complete_from_graph(config: mc.ModelConfig, model_path: Path, default_max_batch: int) -> None:
    """Fill `config`'s inputs, outputs (and, when it declares nothing and every tensor has a
    variable first dim, max_batch_size `default_max_batch` with dynamic batching) from the
    model's graph."""
    try:
        model = onnx.load(str(model_path), load_external_data=False)
    except Exception as exc:
        raise ServeError.unavailable(f"{model_path}: not a readable ONNX model: {exc}") from None
    graph = model.graph
    initializers = {init.name for init in graph.initializer}
    graph_inputs = [i for i in graph.input if i.name not in initializers]
    graph_outputs = list(graph.output)
    declared_nothing = not config.input and not config.output
    if declared_nothing and config.max_batch_size == 0:
        every = graph_inputs + graph_outputs
        batchable = every and all(_dims(v)[:1] == [-1] for v in every)
        if batchable and default_max_batch > 0:  # 0: Triton's "no batching by default"
            config.max_batch_size = default_max_batch
            if config.WhichOneof("scheduling_choice") is None:
                config.dynamic_batching.SetInParent()
    skip_batch = 1 if config.max_batch_size > 0 else 0
    _complete_tensors(config.input, graph_inputs, skip_batch)
    _complete_tensors(config.output, graph_outputs, skip_batch)


def _complete_tensors(
    declared: Any, graph_tensors: list[onnx.ValueInfoProto], skip_batch: int
) -> None:
    found = [
        FoundTensor(
            value_info.name,
            _ONNX_TO_CONFIG.get(value_info.type.tensor_type.elem_type, mc.TYPE_INVALID),
            tuple(_dims(value_info)[skip_batch:]),
        )
        for value_info in graph_tensors
    ]
    # As Triton's onnxruntime backend: blanks are filled, declarations are not checked here
    # (the session's own checks name what does not match).
    complete_tensors(
        declared, found, kind="tensor", where="", origin="in the graph", refuse_conflicts=False
    )


def _dims(value_info: onnx.ValueInfoProto) -> list[int]:
    shape = value_info.type.tensor_type.shape
    return [d.dim_value if d.HasField("dim_value") else -1 for d in shape.dim]
