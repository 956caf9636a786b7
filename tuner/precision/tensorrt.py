"""TensorRT precision on a GPU: a config change, not a new model file.

Triton's onnxruntime backend (and serve/) turn
`optimization.execution_accelerators.gpu_execution_accelerator {name: "tensorrt" parameters
{precision_mode: FP16|INT8}}` into the TensorRT execution provider's fp16/int8 flags, on
KIND_GPU instances only (`tuner.candidate.apply` writes it). INT8 also needs per-tensor
ranges: a calibration table made from the validation data (`tensorrt_calibration.py`), which
the config names.
"""

from __future__ import annotations

from serve.api import detect_platform


def tensorrt_available() -> bool:
    """Whether the server can run TensorRT here: a GPU, and onnxruntime-gpu with its TensorRT
    execution provider."""
    return detect_platform().onnxruntime_tensorrt
