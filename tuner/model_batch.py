"""The largest batch a model accepts, read from the model rather than from its config (which
the tuner itself rewrites), so that a run can always search back up to it."""

from __future__ import annotations

from pathlib import Path

import onnx
from tritonclient.grpc import model_config_pb2 as mc

from serve.api import backend_name


def accepted_batch_size(config: mc.ModelConfig, model_path: Path) -> int | None:
    """The largest batch the model accepts; None when any size is.

    ONNX models say it in their graph: the first dimension of each input is the batch; a
    dynamic one (a name, or no size) takes any batch, a fixed one caps it (the smallest over
    the inputs). Other backends (python, pytorch) cannot be read, so the max_batch_size their
    config declares is what they accept. An ONNX file that cannot be read gives the config's
    value too."""
    if backend_name(config) != "onnxruntime":
        return config.max_batch_size
    try:
        model = onnx.load(str(model_path), load_external_data=False)
    except Exception:  # the server reports an unreadable model; here it only bounds a range
        return config.max_batch_size
    weights = {tensor.name for tensor in model.graph.initializer}
    fixed = []
    for value in model.graph.input:
        dims = value.type.tensor_type.shape.dim
        if value.name in weights or not dims:
            continue
        if dims[0].HasField("dim_value") and dims[0].dim_value > 0:
            fixed.append(dims[0].dim_value)
    return min(fixed) if fixed else None
