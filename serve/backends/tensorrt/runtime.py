"""TensorRT and CUDA for the tensorrt backend: imported only when a plan model loads. Device
memory and streams come from torch (its CUDA build), which every TensorRT install for Python
can have beside it; TensorRT itself only reads and runs the engine."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from serve.backends.tensorrt.engine_io import EngineIO, read_engine_io
from serve.errors import ServeError


def missing_runtime() -> str | None:
    """What is missing to run an engine here (None: nothing), without importing it."""
    if importlib.util.find_spec("tensorrt") is None:
        return "the tensorrt package is not installed (pip install tensorrt: docs/gpu.md)"
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed (the tensorrt backend's device buffers and streams)"
    import torch

    if not torch.cuda.is_available():
        return f"torch {torch.__version__} here cannot use CUDA (a CPU build of torch?)"
    return None


def tensorrt_module() -> Any:
    """The `tensorrt` package, imported only when called (a plan model is loading), never at import
    time; ImportError when it is not installed."""
    import tensorrt

    return tensorrt


_LOGGER: Any = None


def deserialize(path: Path, device_id: int) -> tuple[Any, EngineIO]:
    """The engine in `path` on GPU `device_id`, and its I/O; ServeError naming the file when
    it is not an engine this TensorRT and GPU can run (engines are built per version and GPU)."""
    global _LOGGER
    import torch

    trt = tensorrt_module()
    torch.cuda.set_device(device_id)
    if _LOGGER is None:
        _LOGGER = trt.Logger(trt.Logger.WARNING)
    runtime = trt.Runtime(_LOGGER)
    try:
        engine = runtime.deserialize_cuda_engine(path.read_bytes())
    except OSError as exc:
        raise ServeError.unavailable(f"{path}: cannot read: {exc}") from None
    if engine is None:
        raise ServeError.unavailable(
            f"{path}: not an engine TensorRT {trt.__version__} can run on this GPU (an engine "
            "is built for one TensorRT version and GPU: build it again here)"
        )
    return engine, read_engine_io(engine, trt)
