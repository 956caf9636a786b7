"""Importing a Triton python model file. Runs only inside stub and helper processes."""

from __future__ import annotations

import importlib.util
import os
import sys
import traceback
from pathlib import Path

from serve.backends.python import pb_utils

PB_UTILS_MODULE = "triton_python_backend_utils"
MODEL_CLASS = "TritonPythonModel"
MODEL_MODULE = "model"


class ModelLoadError(Exception):
    """The model file cannot be imported or lacks what the backend needs."""


def import_model_class(model_file: Path) -> type:
    """Import `model_file` as Triton does and return its TritonPythonModel class."""
    sys.modules[PB_UTILS_MODULE] = pb_utils
    version_dir = str(model_file.parent)
    if version_dir not in sys.path:
        sys.path.insert(0, version_dir)  # sibling modules of model.py import by plain name
    spec = importlib.util.spec_from_file_location(MODEL_MODULE, model_file)
    if spec is None or spec.loader is None:
        raise ModelLoadError(f"cannot import {model_file}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODEL_MODULE] = module
    spec.loader.exec_module(module)
    model_class = getattr(module, MODEL_CLASS, None)
    if not isinstance(model_class, type):
        raise ModelLoadError(f"{model_file.name} defines no class {MODEL_CLASS}")
    return model_class


def describe(exc: BaseException, model_file: Path | None = None) -> str:
    """One line for an error message: `ValueError: reason (model.py:12)`."""
    if isinstance(exc, ModelLoadError):
        return str(exc)
    last = traceback.format_exception_only(type(exc), exc)[-1].strip()
    own = type(exc).__module__
    if own.startswith("serve.backends.python."):  # pb_utils' own: named as Triton names them
        last = last.removeprefix(f"{own}.")
    if model_file is None:
        return last
    model_dir = os.path.join(str(model_file.parent), "")
    frames = [
        f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith(model_dir)
    ]
    if not frames:
        return last
    where = frames[-1]
    return f"{last} ({Path(where.filename).name}:{where.lineno})"
