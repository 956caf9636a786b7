"""What a TensorRT engine (model.plan) takes and gives, read from the engine itself, and the
config Triton's tensorrt backend would complete from it.

TensorRT 10 engines have explicit shapes: a dimension of -1 is dynamic, its range given by
each optimization profile (min, opt, max). A model batches, in Triton's sense, when every input
and output has a dynamic first dimension; its max_batch_size is then the smallest profile max
of that dimension over the inputs (profile 0: one execution context per instance uses it).
Nothing here needs a GPU: the engine is any object with TensorRT's ICudaEngine accessors.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from protocol.datatypes import wire_datatype, wire_to_config
from serve.config.tensor_completion import FoundTensor, complete_tensors
from serve.errors import ServeError

Shape = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class EngineTensor:
    """One input or output of an engine: its dtype, its shape (-1 where dynamic) and, for an input,
    its (min, opt, max) shapes in profile 0."""

    name: str
    is_input: bool
    dtype: np.dtype
    shape: Shape  # -1 where dynamic
    profile: tuple[Shape, Shape, Shape] | None = None  # (min, opt, max) in profile 0; inputs

    @property
    def config_type(self) -> int:
        return int(mc.DataType.Value(wire_to_config(wire_datatype(self.dtype))))


@dataclass(frozen=True, slots=True)
class EngineIO:
    """An engine's inputs and outputs, and what Triton's rules make of them (batching, shape
    checks)."""

    tensors: tuple[EngineTensor, ...]

    @property
    def inputs(self) -> tuple[EngineTensor, ...]:
        return tuple(t for t in self.tensors if t.is_input)

    @property
    def outputs(self) -> tuple[EngineTensor, ...]:
        return tuple(t for t in self.tensors if not t.is_input)

    def max_batch_size(self) -> int:
        """The batch Triton would allow (0: the engine does not batch)."""
        if not self.tensors or any(t.shape[:1] != (-1,) for t in self.tensors):
            return 0
        limits = [t.profile[2][0] for t in self.inputs if t.profile is not None]
        return min(limits) if limits else 0

    def check_shapes(self, shapes: Mapping[str, Shape], model: str) -> None:
        """ServeError naming the input whose shape profile 0 does not cover."""
        for tensor in self.inputs:
            shape = shapes.get(tensor.name)
            if shape is None or tensor.profile is None:
                continue
            low, _, high = tensor.profile
            if len(shape) != len(low) or any(
                not lo <= dim <= hi for dim, lo, hi in zip(shape, low, high, strict=True)
            ):
                raise ServeError.invalid(
                    f"model '{model}': input '{tensor.name}' has shape {list(shape)}, outside "
                    f"the engine's optimization profile [{list(low)} .. {list(high)}]"
                )


def read_engine_io(engine: Any, trt: Any) -> EngineIO:
    """The engine's I/O tensors through TensorRT's accessors (`trt`: the tensorrt module)."""
    tensors = []
    for index in range(engine.num_io_tensors):
        name = engine.get_tensor_name(index)
        is_input = engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
        shape = tuple(int(d) for d in engine.get_tensor_shape(name))
        profile = None
        if is_input and -1 in shape and engine.num_optimization_profiles > 0:
            low, opt, high = engine.get_tensor_profile_shape(name, 0)
            profile = (tuple(low), tuple(opt), tuple(high))
        dtype = np.dtype(trt.nptype(engine.get_tensor_dtype(name)))
        tensors.append(EngineTensor(name, is_input, dtype, shape, profile))
    return EngineIO(tuple(tensors))


def complete_config(config: mc.ModelConfig, io: EngineIO, source: str) -> None:
    """Fill what `config` leaves out from the engine (as Triton's tensorrt backend does) and
    refuse what contradicts it, naming the tensor: max_batch_size when it is 0 and the engine
    batches (with dynamic batching), then each input's and output's type and dims (without the
    batch dimension when the model batches)."""
    if config.max_batch_size == 0 and not config.input and not config.output:
        config.max_batch_size = io.max_batch_size()
        if config.max_batch_size and config.WhichOneof("scheduling_choice") is None:
            config.dynamic_batching.SetInParent()
    allowed = io.max_batch_size()
    if config.max_batch_size > allowed:
        raise ServeError.invalid(
            f"{source}: max_batch_size {config.max_batch_size} exceeds what the engine allows "
            f"({allowed}: its optimization profile's largest first dimension, 0 when it does "
            "not batch)"
        )
    skip = 1 if config.max_batch_size > 0 else 0
    for declared, tensors, kind in (
        (config.input, io.inputs, "input"),
        (config.output, io.outputs, "output"),
    ):
        _check_names(declared, tensors, kind, source)
        found = [FoundTensor(t.name, t.config_type, t.shape[skip:]) for t in tensors]
        complete_tensors(
            declared, found, kind=kind, where=source, origin="in the engine", refuse_conflicts=True
        )


def _check_names(declared: Any, tensors: tuple[EngineTensor, ...], kind: str, source: str) -> None:
    engine_names = {t.name for t in tensors}
    for entry in declared:
        if entry.name not in engine_names:
            raise ServeError.invalid(
                f"{source}: {kind} '{entry.name}' is not an {kind} of the engine "
                f"(engine {kind}s: {sorted(engine_names)})"
            )
