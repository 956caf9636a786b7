"""The onnxruntime backend: one InferenceSession per instance, run on the instance's thread.

Session options follow Triton's onnxruntime backend: config `parameters` intra_op_thread_count,
inter_op_thread_count, execution_mode, enable_mem_arena; `optimization.graph.level`; execution
providers from `optimization.execution_accelerators` (cuda / tensorrt with precision_mode). A
KIND_GPU instance whose providers cannot be had fails to load, naming them; its session keeps
them (onnxruntime's fallback to the CPU is turned off): it never runs on the CPU instead.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import onnxruntime as ort
from tritonclient.grpc import model_config_pb2 as mc

from common.invariant import InvariantError
from serve.backends.base import Backend, BatchTimes, InstanceContext, ModelInstance, RequestResult
from serve.backends.batching import batch_rows, concat_inputs, split_outputs
from serve.backends.parameters import ConfigParameters
from serve.errors import ServeError
from serve.inference import InferRequest
from serve.platform import CUDA_PROVIDER, TENSORRT_PROVIDER, ServingPlatform

log = logging.getLogger("serve.onnxruntime")

DEFAULT_MAX_BATCH_SIZE = 4  # Triton's --backend-config=default-max-batch-size default
DEFAULT_MAX_BATCH_SETTING = "default-max-batch-size"


def session_options(config: mc.ModelConfig, source: str) -> ort.SessionOptions:
    """The onnxruntime SessionOptions a model's config asks for: its thread, execution-mode and
    memory-arena `parameters` (ServeError naming `source` for a bad value) and its graph
    optimization level; onnxruntime's defaults for what it leaves out."""
    options = ort.SessionOptions()
    parameters = ConfigParameters(config, source)
    intra = parameters.integer("intra_op_thread_count", minimum=0)
    inter = parameters.integer("inter_op_thread_count", minimum=0)
    mode = parameters.integer("execution_mode")
    arena = parameters.integer("enable_mem_arena")
    if intra is not None:
        options.intra_op_num_threads = intra
    if inter is not None:
        options.inter_op_num_threads = inter
    if mode is not None:
        options.execution_mode = (
            ort.ExecutionMode.ORT_PARALLEL if mode == 1 else ort.ExecutionMode.ORT_SEQUENTIAL
        )
    if arena is not None:
        options.enable_cpu_mem_arena = bool(arena)
    level = config.optimization.graph.level
    options.graph_optimization_level = {
        -1: ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        1: ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    }.get(level, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    return options


def execution_providers(
    config: mc.ModelConfig,
    kind: str,
    device_id: int = 0,
    available: Collection[str] | None = None,
    model_dir: Path | None = None,
) -> tuple[list[Any], list[str]]:
    """Providers (with options) for the session, and warnings for what could not be honoured.

    A KIND_GPU instance runs on CUDA device `device_id`, through the TensorRT provider first
    when the config's gpu_execution_accelerator names tensorrt; a GPU instance is never moved
    to the CPU: a provider it needs and onnxruntime lacks (`available`, default: this
    onnxruntime's) is a ServeError. A relative trt_engine_cache_path is taken from
    `model_dir` (the model's folder), so a repository carries its calibration tables."""
    available = set(ort.get_available_providers() if available is None else available)
    providers: list[Any] = []
    warnings: list[str] = []
    accelerators = config.optimization.execution_accelerators
    if kind == "KIND_GPU":
        if CUDA_PROVIDER not in available:
            raise ServeError.unavailable(
                f"KIND_GPU needs onnxruntime's {CUDA_PROVIDER}, which this onnxruntime lacks "
                "(install onnxruntime-gpu in place of onnxruntime: docs/gpu.md)"
            )
        for accel in accelerators.gpu_execution_accelerator:
            if accel.name == "tensorrt":
                if TENSORRT_PROVIDER not in available:
                    raise ServeError.unavailable(
                        "gpu_execution_accelerator 'tensorrt' needs onnxruntime's "
                        f"{TENSORRT_PROVIDER}, which this onnxruntime lacks"
                    )
                options = tensorrt_options(dict(accel.parameters), device_id, model_dir)
                providers.append((TENSORRT_PROVIDER, options))
            elif accel.name != "cuda":  # CUDA is added below for every GPU instance
                warnings.append(f"unknown gpu_execution_accelerator '{accel.name}' ignored")
        providers.append((CUDA_PROVIDER, {"device_id": device_id}))
    else:
        for accel in accelerators.gpu_execution_accelerator:
            warnings.append(
                f"gpu_execution_accelerator '{accel.name}' ignored: the instance runs on the CPU"
            )
    for accel in accelerators.cpu_execution_accelerator:
        name = {"openvino": "OpenVINOExecutionProvider"}.get(accel.name, accel.name)
        if name in available:
            providers.append(name)
        else:
            warnings.append(f"cpu_execution_accelerator '{accel.name}' unavailable; ignored")
    providers.append("CPUExecutionProvider")
    return providers, warnings


def _flag(text: str) -> bool:
    if text.lower() in ("true", "1"):
        return True
    if text.lower() in ("false", "0"):
        return False
    raise ValueError(text)


# Triton's tensorrt accelerator parameters (onnxruntime backend) -> the TensorRT provider's.
_TENSORRT_PARAMETERS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "max_workspace_size_bytes": ("trt_max_workspace_size", int),
    "trt_max_partition_iterations": ("trt_max_partition_iterations", int),
    "trt_min_subgraph_size": ("trt_min_subgraph_size", int),
    "int8_calibration_table_name": ("trt_int8_calibration_table_name", str),
    "int8_use_native_calibration_table": ("trt_int8_use_native_calibration_table", _flag),
    "trt_engine_cache_enable": ("trt_engine_cache_enable", _flag),
    "trt_engine_cache_path": ("trt_engine_cache_path", str),
}


def tensorrt_options(
    parameters: dict[str, str], device_id: int, model_dir: Path | None = None
) -> dict[str, Any]:
    """The TensorRT provider's options for a tensorrt accelerator's `parameters`.

    Engines are cached (in `default_engine_cache()` unless the parameters say otherwise):
    building one takes seconds to minutes, and onnxruntime keys its cache files by the model,
    the precision and the GPU, so instances and restarts reuse them. An INT8 calibration
    table is looked up in the engine cache folder, as onnxruntime does; a relative folder is
    taken from `model_dir` (Triton passes it on as it is: relative to the server's cwd)."""
    precision = parameters.get("precision_mode", "FP32").upper()
    if precision not in ("FP32", "FP16", "INT8"):
        raise ServeError.invalid(
            f"tensorrt precision_mode '{precision}' is not one of FP32, FP16, INT8"
        )
    options: dict[str, Any] = {
        "device_id": device_id,
        "trt_fp16_enable": precision == "FP16",
        "trt_int8_enable": precision == "INT8",
        "trt_engine_cache_enable": True,
        "trt_engine_cache_path": str(default_engine_cache()),
    }
    for name, (option, convert) in _TENSORRT_PARAMETERS.items():
        if name in parameters:
            try:
                options[option] = convert(parameters[name])
            except ValueError:
                raise ServeError.invalid(
                    f"tensorrt parameter '{name}': '{parameters[name]}' is not valid"
                ) from None
    cache = Path(options["trt_engine_cache_path"])
    if model_dir is not None and not cache.is_absolute():
        options["trt_engine_cache_path"] = str(model_dir / cache)
    return options


def default_engine_cache() -> Path:
    """$XDG_CACHE_HOME/autotune/tensorrt (~/.cache/autotune/tensorrt)."""
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "autotune" / "tensorrt"


class OnnxRuntimeInstance(ModelInstance):
    """One InferenceSession. A batching model's requests run as one `session.run` on their inputs
    concatenated along the batch dimension; an onnxruntime error fails every request of the batch.
    Quick batches may run on the event loop's thread (it waits on nothing else)."""

    inline_when_quick = True

    def __init__(self, context: InstanceContext) -> None:
        super().__init__(context)
        self._session: ort.InferenceSession | None = None
        self._output_names: list[str] = []
        self._batched = context.config.max_batch_size > 0
        self._input_casts: dict[str, np.dtype] = {}

    def load(self) -> None:
        ctx = self.context
        source = str(ctx.model_dir / "config.pbtxt")
        options = session_options(ctx.config, source)
        providers, warnings = execution_providers(
            ctx.config, ctx.kind, ctx.device_id, model_dir=ctx.model_dir
        )
        for message in warnings:
            log.warning("%s: %s", ctx.instance_name, message)
        try:
            self._session = ort.InferenceSession(
                str(ctx.model_path), sess_options=options, providers=providers
            )
        except Exception as exc:  # onnxruntime raises several unrelated exception types
            raise ServeError.unavailable(f"{ctx.model_path}: cannot load: {exc}") from None
        if ctx.kind == "KIND_GPU":
            require_gpu_session(self._session, providers, ctx.instance_name)
        model_inputs = {i.name for i in self._session.get_inputs()}
        model_outputs = [o.name for o in self._session.get_outputs()]
        for tensor in ctx.config.input:
            if tensor.name not in model_inputs:
                raise ServeError.unavailable(
                    f"{source}: input '{tensor.name}' is not an input of {ctx.model_path.name} "
                    f"(model inputs: {sorted(model_inputs)})"
                )
        for tensor in ctx.config.output:
            if tensor.name not in model_outputs:
                raise ServeError.unavailable(
                    f"{source}: output '{tensor.name}' is not an output of {ctx.model_path.name} "
                    f"(model outputs: {model_outputs})"
                )
        self._output_names = [o.name for o in ctx.config.output]
        # The sequence batcher feeds control and state inputs the config's inputs do not list,
        # and keeps each state output, which the model computes even though no one asks for it.
        sequence = ctx.config.sequence_batching
        for name in [c.name for c in sequence.control_input] + [
            s.input_name for s in sequence.state
        ]:
            if name not in model_inputs:
                raise ServeError.unavailable(
                    f"{source}: sequence_batching input '{name}' is not an input of "
                    f"{ctx.model_path.name} (model inputs: {sorted(model_inputs)})"
                )
        for state in sequence.state:
            if state.output_name not in model_outputs:
                raise ServeError.unavailable(
                    f"{source}: sequence_batching.state output '{state.output_name}' is not an "
                    f"output of {ctx.model_path.name} (model outputs: {model_outputs})"
                )
            if state.output_name not in self._output_names:
                self._output_names.append(state.output_name)

    def execute(self, requests: Sequence[InferRequest], times: BatchTimes) -> list[RequestResult]:
        if self._session is None:
            raise InvariantError("an instance executes only once loaded")
        start = time.perf_counter_ns()
        if self._batched:
            rows = [batch_rows(r) for r in requests]
            feeds = concat_inputs(requests)
        else:
            rows = [1]
            feeds = requests[0].inputs
        after_input = time.perf_counter_ns()
        try:
            values = self._session.run(self._output_names, feeds)
        except Exception as exc:
            error = ServeError.internal(f"onnxruntime: {exc}")
            return [error] * len(requests)
        after_infer = time.perf_counter_ns()
        outputs = dict(zip(self._output_names, values, strict=True))
        results: list[RequestResult] = (
            list(split_outputs(outputs, rows)) if self._batched else [outputs]
        )
        end = time.perf_counter_ns()
        times.compute_input_ns = after_input - start
        times.compute_infer_ns = after_infer - after_input
        times.compute_output_ns = end - after_infer
        return results

    def unload(self) -> None:
        self._session = None


def graph_needed(config: mc.ModelConfig) -> bool:
    """Whether completing `config` needs the graph: a list of inputs or outputs left empty, or
    a declared tensor without a data type or dims (and no reshape)."""
    if not config.input or not config.output:
        return True
    return any(
        tensor.data_type == mc.TYPE_INVALID or (not tensor.dims and not tensor.HasField("reshape"))
        for tensor in (*config.input, *config.output)
    )


class ProviderSession(Protocol):
    """What `require_gpu_session` needs of an onnxruntime InferenceSession."""

    def get_providers(self) -> list[str]: ...

    def disable_fallback(self) -> None: ...


def require_gpu_session(session: ProviderSession, asked: Sequence[Any], where: str) -> None:
    """A GPU instance's session has every GPU provider it asked for, and keeps them: without
    this, onnxruntime builds a CPU session when a GPU provider cannot start (with a warning in
    its own log only), and falls back to the CPU at run time when one fails. ServeError naming
    the instance and the providers otherwise. (Nodes the CUDA provider does not implement still
    run on the CPU within the session, as in Triton: onnxruntime places them there itself.)"""
    names = [entry[0] if isinstance(entry, tuple) else entry for entry in asked]
    wanted = [name for name in names if name in (CUDA_PROVIDER, TENSORRT_PROVIDER)]
    got = list(session.get_providers())
    missing = [name for name in wanted if name not in got]
    if missing:
        raise ServeError.unavailable(
            f"{where}: KIND_GPU, but onnxruntime made its session without "
            f"{', '.join(missing)} (session providers: {', '.join(got) or 'none'}); it is "
            "not run on the CPU instead"
        )
    session.disable_fallback()


class OnnxRuntimeBackend(Backend):
    """Models of platform onnxruntime_onnx (`model.onnx`); two instances per CPU group by default,
    as Triton."""

    name = "onnxruntime"
    default_model_filename = "model.onnx"
    platforms = ("onnxruntime_onnx",)

    def default_instance_count(self, kind: str) -> int:
        return 2 if kind == "KIND_CPU" else 1

    def gpu_unavailable_reason(self, platform: ServingPlatform) -> str | None:
        if platform.onnxruntime_cuda:
            return None
        if not platform.gpus:
            return "no GPU is visible"
        return (
            f"onnxruntime has no {CUDA_PROVIDER} (install onnxruntime-gpu in place of "
            "onnxruntime: docs/gpu.md)"
        )

    def create_instance(self, context: InstanceContext) -> ModelInstance:
        return OnnxRuntimeInstance(context)

    def autocomplete(
        self, config: mc.ModelConfig, model_path: Path, settings: Mapping[str, str] | None = None
    ) -> None:
        """Complete inputs, outputs and batching from the ONNX graph, as Triton does; a model
        that can batch gets max_batch_size `default-max-batch-size` of `settings` (4 unless
        set; 0: no batching)."""
        if not config.platform and not config.backend:
            config.platform = "onnxruntime_onnx"
        if not config.backend:
            config.backend = "onnxruntime"
        if graph_needed(config):
            from serve.backends.onnx_graph import complete_from_graph

            default = (settings or {}).get(DEFAULT_MAX_BATCH_SETTING)
            complete_from_graph(
                config, model_path, DEFAULT_MAX_BATCH_SIZE if default is None else int(default)
            )
