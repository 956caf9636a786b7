"""The onnxruntime backend: one InferenceSession per instance, run on the instance's thread.

Session options follow Triton's onnxruntime backend: config `parameters` intra_op_thread_count,
inter_op_thread_count, execution_mode, enable_mem_arena; `optimization.graph.level`; execution
providers from `optimization.execution_accelerators` (cuda / tensorrt with precision_mode), which
fall back to the CPU with a warning when onnxruntime-gpu is not installed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from tritonclient.grpc import model_config_pb2 as mc

from serve.backends.base import Backend, BatchTimes, InstanceContext, ModelInstance, RequestResult
from serve.backends.batching import batch_rows, concat_inputs, split_outputs
from serve.errors import ServeError
from serve.inference import InferRequest

log = logging.getLogger("serve.onnxruntime")

DEFAULT_MAX_BATCH_SIZE = 4  # Triton's --backend-config=default-max-batch-size default


def _parameter(config: mc.ModelConfig, key: str) -> str | None:
    if key in config.parameters:
        return config.parameters[key].string_value
    return None


def _int_parameter(config: mc.ModelConfig, key: str, source: str) -> int | None:
    value = _parameter(config, key)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise ServeError.invalid(
            f"{source}: parameters['{key}']: '{value}' is not an integer"
        ) from None


def session_options(config: mc.ModelConfig, source: str) -> ort.SessionOptions:
    options = ort.SessionOptions()
    intra = _int_parameter(config, "intra_op_thread_count", source)
    inter = _int_parameter(config, "inter_op_thread_count", source)
    mode = _int_parameter(config, "execution_mode", source)
    arena = _int_parameter(config, "enable_mem_arena", source)
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


def execution_providers(config: mc.ModelConfig, kind: str) -> tuple[list[Any], list[str]]:
    """Providers (with options) for the session, and warnings for what could not be honoured."""
    available = set(ort.get_available_providers())
    providers: list[Any] = []
    warnings: list[str] = []
    accelerators = config.optimization.execution_accelerators
    if kind == "KIND_GPU":
        for accel in accelerators.gpu_execution_accelerator:
            params = dict(accel.parameters)
            if accel.name == "tensorrt":
                if "TensorrtExecutionProvider" not in available:
                    warnings.append("tensorrt accelerator requested but unavailable; using CPU")
                    continue
                precision = params.get("precision_mode", "FP32").upper()
                trt: dict[str, Any] = {
                    "trt_fp16_enable": precision == "FP16",
                    "trt_int8_enable": precision == "INT8",
                }
                if "max_workspace_size_bytes" in params:
                    trt["trt_max_workspace_size"] = int(params["max_workspace_size_bytes"])
                if "trt_engine_cache_enable" in params:
                    trt["trt_engine_cache_enable"] = params["trt_engine_cache_enable"] == "true"
                if "trt_engine_cache_path" in params:
                    trt["trt_engine_cache_path"] = params["trt_engine_cache_path"]
                providers.append(("TensorrtExecutionProvider", trt))
            elif accel.name == "cuda":
                pass  # CUDA is added below for every GPU instance
            else:
                warnings.append(f"unknown gpu_execution_accelerator '{accel.name}' ignored")
        if "CUDAExecutionProvider" in available:
            providers.append(("CUDAExecutionProvider", {"device_id": 0}))
        else:
            warnings.append("no CUDA execution provider (onnxruntime-gpu not installed); using CPU")
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


class OnnxRuntimeInstance(ModelInstance):
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
        providers, warnings = execution_providers(ctx.config, ctx.kind)
        for message in warnings:
            log.warning("%s: %s", ctx.instance_name, message)
        try:
            self._session = ort.InferenceSession(
                str(ctx.model_path), sess_options=options, providers=providers
            )
        except Exception as exc:  # onnxruntime raises several unrelated exception types
            raise ServeError.unavailable(f"{ctx.model_path}: cannot load: {exc}") from None
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
        assert self._session is not None, "execute before load"
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


class OnnxRuntimeBackend(Backend):
    name = "onnxruntime"
    default_model_filename = "model.onnx"
    platforms = ("onnxruntime_onnx",)

    def default_instance_count(self, kind: str) -> int:
        return 2 if kind == "KIND_CPU" else 1

    def supports_gpu(self) -> bool:
        return "CUDAExecutionProvider" in ort.get_available_providers()

    def create_instance(self, context: InstanceContext) -> ModelInstance:
        return OnnxRuntimeInstance(context)

    def autocomplete(self, config: mc.ModelConfig, model_path: Path) -> None:
        """Complete inputs, outputs and batching from the ONNX graph, as Triton does."""
        if not config.platform and not config.backend:
            config.platform = "onnxruntime_onnx"
        if not config.backend:
            config.backend = "onnxruntime"
        if graph_needed(config):
            from serve.backends.onnx_graph import complete_from_graph

            complete_from_graph(config, model_path, DEFAULT_MAX_BATCH_SIZE)
