"""TensorRT precision on a GPU: a config change, not a new model file.

Triton's onnxruntime backend (and serve/) turn
`optimization.execution_accelerators.gpu_execution_accelerator {name: "tensorrt" parameters
{precision_mode: FP16|INT8}}` into the TensorRT execution provider's fp16/int8 flags. It
applies to KIND_GPU instances only. INT8 needs either a calibration table
(`int8_calibration_table_name`) or a model with QDQ nodes (the int8 variant file), which
TensorRT then runs with explicit quantization.
"""

from __future__ import annotations

from tritonclient.grpc import model_config_pb2 as mc

from serve.api import detect_platform
from tuner.precision.errors import PrecisionError

TENSORRT_PRECISIONS = {"fp32": "FP32", "fp16": "FP16", "int8": "INT8"}


def tensorrt_available() -> bool:
    """Whether the server can run TensorRT here: a GPU, and onnxruntime-gpu with its TensorRT
    execution provider."""
    return detect_platform().onnxruntime_tensorrt


def with_tensorrt_precision(config: mc.ModelConfig, precision: str) -> mc.ModelConfig:
    """A copy of `config` whose tensorrt GPU accelerator runs at `precision` (fp32|fp16|int8).

    An existing tensorrt entry keeps its other parameters (workspace size, engine cache); other
    accelerators are left as they are. `config` itself is not changed.
    """
    mode = TENSORRT_PRECISIONS.get(precision.lower())
    if mode is None:
        raise PrecisionError(
            f"TensorRT precision '{precision}' is not one of {', '.join(TENSORRT_PRECISIONS)}"
        )
    changed = mc.ModelConfig()
    changed.CopyFrom(config)
    accelerators = changed.optimization.execution_accelerators.gpu_execution_accelerator
    entry = next((a for a in accelerators if a.name == "tensorrt"), None)
    if entry is None:
        entry = accelerators.add()
        entry.name = "tensorrt"
    entry.parameters["precision_mode"] = mode
    return changed
