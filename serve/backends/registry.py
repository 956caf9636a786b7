"""Which module implements which backend. A new backend is a module plus one entry here."""

from __future__ import annotations

import importlib

from tritonclient.grpc import model_config_pb2 as mc

from serve.backends.base import Backend
from serve.errors import ServeError

# backend name -> "module:class"; imported on first use so optional runtimes stay optional.
_BACKENDS: dict[str, str] = {
    "onnxruntime": "serve.backends.onnxruntime:OnnxRuntimeBackend",
    "python": "serve.backends.python:PythonBackend",
    "pytorch": "serve.backends.pytorch:PyTorchBackend",
    "tensorrt": "serve.backends.tensorrt:TensorRTBackend",
}

# Triton's platform names -> backend names.
_PLATFORMS: dict[str, str] = {
    "onnxruntime_onnx": "onnxruntime",
    "pytorch_libtorch": "pytorch",
    "tensorrt_plan": "tensorrt",
}

# Default model file names, as Triton's backends use them.
DEFAULT_MODEL_FILENAMES: dict[str, str] = {
    "onnxruntime": "model.onnx",
    "python": "model.py",
    "pytorch": "model.pt",
    "tensorrt": "model.plan",
}

_loaded: dict[str, Backend] = {}


def backend_name(config: mc.ModelConfig) -> str:
    """The backend a config asks for, from `backend` or else from `platform`."""
    if config.backend:
        return config.backend
    if config.platform:
        return _PLATFORMS.get(config.platform, config.platform)
    return ""


def backend_names() -> tuple[str, ...]:
    """Every backend this server knows, whether or not its runtime is installed."""
    return tuple(_BACKENDS)


def get_backend(name: str) -> Backend:
    """The backend object for `name`; ServeError when unknown or its runtime is missing."""
    if name in _loaded:
        return _loaded[name]
    target = _BACKENDS.get(name)
    if target is None:
        known = ", ".join(sorted(_BACKENDS))
        raise ServeError.invalid(f"unknown backend '{name}' (known: {known})")
    module_name, class_name = target.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ServeError.unavailable(
            f"backend '{name}' cannot be used: {exc} (install the matching extra)"
        ) from exc
    backend: Backend = getattr(module, class_name)()
    _loaded[name] = backend
    return backend
