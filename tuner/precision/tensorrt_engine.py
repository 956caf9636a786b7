"""TensorRT engines (model.plan) built from the ONNX model, for the tensorrt backend.

- plan_fp16: the FP32 model parsed by TensorRT's ONNX parser, built with FP16 allowed.
- plan_int8: the static int8 QDQ model (`builders.build_int8_static`, calibrated on the
  validation data) built with INT8 and FP16 allowed: TensorRT's explicit quantization takes the
  scales from the Q/DQ nodes, so the engine computes what the calibration chose (TensorRT 10
  deprecates implicit calibrators for this).

One optimization profile covers batch 1 to the largest max_batch_size the tuner tries (its
opt shape at that largest batch: the tuner looks for throughput); a dimension the graph leaves
variable beyond the batch takes the config's dims, and is refused naming the input when the
config leaves it variable too. An engine runs only with the TensorRT version and GPU model
that built it, so both are part of its cache key (`engine_method`).

Building needs a GPU and the tensorrt package (imported here, only when an engine is built).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from tuner.precision.errors import PrecisionError

ENGINE_FLAGS = {"plan_fp16": ("FP16",), "plan_int8": ("INT8", "FP16")}
DEFAULT_WORKSPACE_BYTES = 4 << 30
Shape = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class InputProfile:
    """One input's shapes in the engine's optimization profile (batch dim included)."""

    name: str
    min: Shape
    opt: Shape
    max: Shape


def engine_method(precision: str, trt_version: str, gpu_name: str, max_batch: int) -> str:
    """What an engine depends on beyond its source model, in words (the cache key's method)."""
    flags = "+".join(ENGINE_FLAGS[precision])
    batch = f", batch 1..{max_batch}" if max_batch > 0 else ""
    return f"TensorRT {trt_version} engine, {flags}{batch}, for {gpu_name}"


def input_profiles(
    graph_inputs: Sequence[tuple[str, Shape]], config: mc.ModelConfig, max_batch: int
) -> list[InputProfile]:
    """The optimization profile of each input whose graph shape has a variable dimension.

    `graph_inputs` are (name, shape) as TensorRT's parser sees the network, -1 where variable;
    `max_batch` is the largest batch the engine must take (0: the model does not batch)."""
    declared = {i.name: list(i.dims) for i in config.input}
    batching = config.max_batch_size > 0
    profiles = []
    for name, shape in graph_inputs:
        if batching and shape[:1] != (-1,):
            raise PrecisionError(
                f"input '{name}': the ONNX graph fixes its first dimension at "
                f"{shape[0] if shape else '(none)'}; a batching TensorRT engine needs it variable"
            )
        if -1 not in shape:
            continue
        dims = declared.get(name)
        if dims is None:
            raise PrecisionError(f"input '{name}' of the ONNX graph is not in the model's config")
        if batching:
            rest = _fixed(name, shape[1:], dims)
            profiles.append(InputProfile(name, (1, *rest), (max_batch, *rest), (max_batch, *rest)))
        else:
            fixed = _fixed(name, shape, dims)
            profiles.append(InputProfile(name, fixed, fixed, fixed))
    return profiles


def _fixed(name: str, graph: Shape, declared: list[int]) -> Shape:
    if len(graph) != len(declared):
        raise PrecisionError(
            f"input '{name}': the config's dims {declared} do not match the ONNX graph's "
            f"{list(graph)}"
        )
    shape = tuple(g if g != -1 else d for g, d in zip(graph, declared, strict=True))
    if -1 in shape:
        raise PrecisionError(
            f"input '{name}' has a variable dimension in both the ONNX graph and the config "
            f"({declared}); a TensorRT engine is built for fixed dims beyond the batch: give "
            "them in config.pbtxt"
        )
    return shape


def build_engine(
    source: Path,
    target: Path,
    precision: str,
    config: mc.ModelConfig,
    max_batch: int,
    *,
    workspace_bytes: int = DEFAULT_WORKSPACE_BYTES,
    trt: Any = None,
) -> None:
    """Build `precision`'s engine from the ONNX model `source` into `target` (`trt`: the
    tensorrt module, imported when None). PrecisionError with the parser's or builder's
    messages when TensorRT cannot build it."""
    if trt is None:
        trt = importlib.import_module("tensorrt")
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)  # explicit batch: TensorRT 10's only mode
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(source)):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise PrecisionError(f"TensorRT cannot parse {source.name}: {errors or 'no reason given'}")
    graph_inputs = [
        (network.get_input(i).name, tuple(int(d) for d in network.get_input(i).shape))
        for i in range(network.num_inputs)
    ]
    settings = builder.create_builder_config()
    settings.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, workspace_bytes)
    for flag in ENGINE_FLAGS[precision]:
        settings.set_flag(getattr(trt.BuilderFlag, flag))
    profiles = input_profiles(graph_inputs, config, max_batch)
    if profiles:
        profile = builder.create_optimization_profile()
        for entry in profiles:
            profile.set_shape(entry.name, entry.min, entry.opt, entry.max)
        settings.add_optimization_profile(profile)
    serialized = builder.build_serialized_network(network, settings)
    if serialized is None:
        raise PrecisionError(
            f"TensorRT could not build the {precision} engine of {source.name} (its log above "
            "says why)"
        )
    target.write_bytes(bytes(serialized))
