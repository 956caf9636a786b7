"""One TensorRT instance: the engine on its GPU, one execution context (profile 0) and one
CUDA stream. A batch's inputs are copied to the GPU, the engine runs with the batch's shapes,
the outputs come back; shapes outside the profile are refused naming the input."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from serve.backends.base import BatchTimes, InstanceContext, ModelInstance, RequestResult
from serve.backends.batching import batch_rows, concat_inputs, split_outputs
from serve.backends.tensorrt.engine_io import EngineIO
from serve.backends.tensorrt.runtime import deserialize
from serve.errors import ServeError
from serve.inference import InferRequest


class TensorRTInstance(ModelInstance):
    def __init__(self, context: InstanceContext) -> None:
        super().__init__(context)
        self._engine: Any = None
        self._context: Any = None
        self._stream: Any = None
        self._io = EngineIO(())
        self._batched = context.config.max_batch_size > 0
        self._device = f"cuda:{context.device_id}"

    def load(self) -> None:
        ctx = self.context
        if ctx.kind != "KIND_GPU":
            raise ServeError.unavailable(
                f"model '{ctx.model_name}': the tensorrt backend runs on GPUs only (instance "
                f"{ctx.instance_name} is {ctx.kind})"
            )
        import torch

        self._engine, self._io = deserialize(ctx.model_path, ctx.device_id)
        self._stream = torch.cuda.Stream(device=self._device)
        self._context = self._engine.create_execution_context()
        if self._context is None:
            raise ServeError.unavailable(
                f"model '{ctx.model_name}': TensorRT could not create an execution context "
                f"on GPU {ctx.device_id} (out of GPU memory?)"
            )
        if self._engine.num_optimization_profiles > 0:
            self._context.set_optimization_profile_async(0, self._stream.cuda_stream)

    def execute(self, requests: Sequence[InferRequest], times: BatchTimes) -> list[RequestResult]:
        import torch

        start = time.perf_counter_ns()
        rows = [batch_rows(r) for r in requests] if self._batched else [1]
        feeds = concat_inputs(requests) if self._batched else dict(requests[0].inputs)
        model = self.context.model_name
        try:
            self._io.check_shapes({n: tuple(a.shape) for n, a in feeds.items()}, model)
        except ServeError as refused:
            return [refused] * len(requests)
        with torch.cuda.stream(self._stream):
            keep = []  # device tensors live until the stream is done with them
            for tensor in self._io.inputs:
                array = np.ascontiguousarray(feeds[tensor.name], dtype=tensor.dtype)
                on_gpu = torch.from_numpy(array).to(self._device, non_blocking=True)
                keep.append(on_gpu)
                self._context.set_input_shape(tensor.name, tuple(array.shape))
                self._context.set_tensor_address(tensor.name, on_gpu.data_ptr())
            outputs: dict[str, Any] = {}
            for tensor in self._io.outputs:
                shape = tuple(self._context.get_tensor_shape(tensor.name))
                dtype = torch.from_numpy(np.empty(0, tensor.dtype)).dtype
                outputs[tensor.name] = torch.empty(shape, dtype=dtype, device=self._device)
                self._context.set_tensor_address(tensor.name, outputs[tensor.name].data_ptr())
            after_input = time.perf_counter_ns()
            ran = self._context.execute_async_v3(self._stream.cuda_stream)
            self._stream.synchronize()
        after_infer = time.perf_counter_ns()
        if not ran:
            failed = ServeError.internal(f"model '{model}': TensorRT failed to run the batch")
            return [failed] * len(requests)
        arrays = {name: value.cpu().numpy() for name, value in outputs.items()}
        wanted = {o.name for o in self.context.config.output} or set(arrays)
        arrays = {name: arrays[name] for name in wanted}
        results: list[RequestResult] = (
            list(split_outputs(arrays, rows)) if self._batched else [arrays]
        )
        times.compute_input_ns = after_input - start
        times.compute_infer_ns = after_infer - after_input
        times.compute_output_ns = time.perf_counter_ns() - after_infer
        return results

    def unload(self) -> None:
        self._context = None
        self._engine = None
        self._stream = None
