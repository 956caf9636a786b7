"""fp16 / bf16 variants of TorchScript models, and running them for the accuracy guard.

A variant is a TorchScript module of its own (`model.bf16.pt`): the original module with its
floating weights and buffers cast, inside a wrapper whose forward() takes the same arguments
(names, order, defaults), casts its floating tensor inputs to the reduced type and gives
reduced-type outputs back as float32. The config's data types stay as they are at the
protocol boundary, and the server serves the file like any other TorchScript model (the way
Triton users cast a model with `.half()` and a cast around it before scripting).

The wrapper is Python source written from forward()'s schema and scripted, so it covers what
TorchScript can type: Tensor and Optional[Tensor] arguments; a Tensor, a tuple or list of
Tensors or a Dict[str, Tensor] returned. Anything else is a PrecisionError saying what.
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from common.invariant import InvariantError
from serve.api import ServeError, gpu_unavailable_reason, open_torchscript
from tuner.precision.accuracy import Outputs, collect_outputs
from tuner.precision.errors import PrecisionError
from tuner.precision.validation import ValidationSet

DTYPES = {"fp16": "torch.float16", "bf16": "torch.bfloat16"}
TORCHSCRIPT_PLATFORMS = ("pytorch_libtorch",)

_TEMPLATE = """\
from typing import Dict, List, Optional, Tuple

import torch


def _in(t: torch.Tensor) -> torch.Tensor:
    if t.is_floating_point():
        return t.to({dtype})
    return t


def _in_optional(t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    if t is None:
        return t
    return _in(t)


def _out(t: torch.Tensor) -> torch.Tensor:
    if t.dtype == {dtype}:
        return t.to(torch.float32)
    return t


class Cast(torch.nn.Module):
    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, {parameters}) -> {returns}:
        out = self.inner({arguments})
        return {result}
"""


def is_torchscript_model(config: mc.ModelConfig, model_path: Path) -> bool:
    """Whether the variants of this model are TorchScript casts: a .pt / .pth file served by
    the pytorch backend (or a TorchScript platform)."""
    return Path(model_path).suffix.lower() in (".pt", ".pth") and (
        config.backend == "pytorch" or config.platform in TORCHSCRIPT_PLATFORMS
    )


def cast_method(precision: str) -> str:
    """How the variant is made, for the report and the cache key."""
    import torch

    kind = DTYPES[precision].removeprefix("torch.")
    return (
        f"TorchScript module cast to {kind} (weights and floating inputs; {kind} outputs "
        f"back to float32), torch {torch.__version__}"
    )


def build_cast_module(source: Path, target: Path, precision: str) -> None:
    """Write the `precision` variant of the TorchScript file `source` to `target`."""
    import torch

    dtype = DTYPES[precision]
    inner = torch.jit.load(str(source), map_location="cpu")
    code = _TEMPLATE.format(dtype=dtype, **_forward_parts(inner))
    with tempfile.TemporaryDirectory(prefix="cast-") as scratch:
        # torch.jit.script reads a class's source from its file: the wrapper gets one.
        path = Path(scratch) / f"autotune_cast_{precision}.py"
        path.write_text(code)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        if spec is None or spec.loader is None:
            raise InvariantError(f"a .py file imports as a module: {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        try:
            spec.loader.exec_module(module)
            wrapper = module.Cast(inner.to(getattr(torch, dtype.removeprefix("torch."))))
            scripted = torch.jit.script(wrapper)
        finally:
            del sys.modules[path.stem]
    scripted.save(str(target))


def _forward_parts(inner: Any) -> dict[str, str]:
    """forward()'s parameters, the call to the inner module, its return type and the cast of
    what it returns, as source text."""
    try:
        schema = inner.forward.schema
    except (AttributeError, RuntimeError) as exc:
        raise PrecisionError(f"the TorchScript module has no readable forward(): {exc}") from None
    parameters, arguments = [], []
    for arg in schema.arguments[1:]:
        kind = str(arg.type)
        if not arg.name.isidentifier():
            raise PrecisionError(f"forward() argument '{arg.name}' is no Python name")
        if kind == "Tensor" and not arg.has_default_value():
            parameters.append(f"{arg.name}: torch.Tensor")
            arguments.append(f"_in({arg.name})")
        elif kind == "Optional[Tensor]" and arg.default_value in (None,):
            default = " = None" if arg.has_default_value() else ""
            parameters.append(f"{arg.name}: Optional[torch.Tensor]{default}")
            arguments.append(f"_in_optional({arg.name})")
        else:
            raise PrecisionError(
                f"forward() argument '{arg.name}' is {kind}"
                + (" with a default" if arg.has_default_value() else "")
                + ": fp16 / bf16 variants are made for modules that take tensors"
            )
    if len(schema.returns) != 1:
        raise PrecisionError("forward() returns several values outside a tuple")
    returns = schema.returns[0].type
    text = str(returns)
    if text == "Tensor":
        result, annotation = "_out(out)", "torch.Tensor"
    elif text.startswith("Tuple[") and all(str(e) == "Tensor" for e in returns.elements()):
        count = len(returns.elements())
        result = "(" + ", ".join(f"_out(out[{i}])" for i in range(count)) + ",)"
        annotation = "Tuple[" + ", ".join(["torch.Tensor"] * count) + "]"
    elif text == "List[Tensor]":
        result, annotation = "[_out(t) for t in out]", "List[torch.Tensor]"
    elif text == "Dict(str, Tensor)" or text == "Dict[str, Tensor]":
        result, annotation = "{k: _out(v) for k, v in out.items()}", "Dict[str, torch.Tensor]"
    else:
        raise PrecisionError(
            f"forward() returns {text}: fp16 / bf16 variants are made for modules that return "
            "a tensor, a tuple or list of tensors or a dict of tensors"
        )
    return {
        "parameters": ", ".join(parameters),
        "arguments": ", ".join(arguments),
        "returns": annotation,
        "result": result,
    }


def check_device() -> tuple[str, str]:
    """Where the accuracy guard runs TorchScript models: (kind, words). On a GPU where torch
    can use one (where fp16 is served), else on the CPU."""
    if gpu_unavailable_reason("pytorch") is None:
        return "KIND_GPU", "on GPU 0"
    return "KIND_CPU", "on the CPU"


def torchscript_outputs(
    config: mc.ModelConfig, path: Path, validation: ValidationSet, names: list[str], kind: str
) -> Outputs:
    """Every validation sample through the TorchScript file `path` as the pytorch backend
    runs it (on `kind`), each output with all rows, rows first."""
    try:
        runner = open_torchscript(config, path, kind)
    except ServeError as exc:
        raise PrecisionError(f"{path.name} does not load: {exc.message}") from None
    try:
        runs = [runner.run(dict(feed)) for feed in validation.feeds()]
    except ServeError as exc:
        raise PrecisionError(f"{path.name} does not run on the validation inputs: {exc}") from None
    except Exception as exc:  # torch raises many unrelated types from forward()
        raise PrecisionError(
            f"{path.name} does not run on the validation inputs: {type(exc).__name__}: {exc}"
        ) from None
    finally:
        runner.close()
    picked = [{name: np.asarray(run[name]) for name in names} for run in runs]
    return collect_outputs(picked, names, validation.batched)
