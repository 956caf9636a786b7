"""One TensorRT engine ready to run on one GPU: the engine, an execution context on profile 0
and a CUDA stream. The tensorrt backend's instances run their batches through it, the tuner's
accuracy guard its validation inputs (`serve.api.open_engine`)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from serve.backends.tensorrt.runtime import deserialize
from serve.errors import ServeError


@dataclass(frozen=True, slots=True)
class EngineRun:
    """One run's outputs (every output of the engine, on the host) and where its time went."""

    outputs: dict[str, np.ndarray]
    input_ns: int  # shapes set, inputs copied to the GPU
    infer_ns: int  # the engine run, to the stream's end
    output_ns: int  # outputs copied back


class EngineRunner:
    """An engine deserialized on GPU `device_id`, with its execution context and stream; `run` runs
    one batch and waits for it. Not for concurrent use: each instance has its own."""

    def __init__(self, path: Path, device_id: int, model: str) -> None:
        """ServeError (naming `model`, or the file) when the engine cannot run here."""
        import torch

        self.model = model
        self._device = f"cuda:{device_id}"
        self._engine, self.io = deserialize(path, device_id)
        self._stream: Any = torch.cuda.Stream(device=self._device)
        self._context: Any = self._engine.create_execution_context()
        if self._context is None:
            raise ServeError.unavailable(
                f"model '{model}': TensorRT could not create an execution context on GPU "
                f"{device_id} (out of GPU memory?)"
            )
        if self._engine.num_optimization_profiles > 0:
            self._context.set_optimization_profile_async(0, self._stream.cuda_stream)

    def run(self, feeds: Mapping[str, np.ndarray]) -> EngineRun:
        """The engine on `feeds` (input name -> array); ServeError naming the input whose
        shape the profile does not cover, or saying the run failed."""
        import torch

        start = time.perf_counter_ns()
        self.io.check_shapes({n: tuple(a.shape) for n, a in feeds.items()}, self.model)
        with torch.cuda.stream(self._stream):
            keep = []  # device tensors live until the stream is done with them
            for tensor in self.io.inputs:
                if tensor.name not in feeds:
                    raise ServeError.invalid(
                        f"model '{self.model}': input '{tensor.name}' is missing"
                    )
                array = np.ascontiguousarray(feeds[tensor.name], dtype=tensor.dtype)
                on_gpu = torch.from_numpy(array).to(self._device, non_blocking=True)
                keep.append(on_gpu)
                self._context.set_input_shape(tensor.name, tuple(array.shape))
                self._context.set_tensor_address(tensor.name, on_gpu.data_ptr())
            outputs: dict[str, Any] = {}
            for tensor in self.io.outputs:
                shape = tuple(self._context.get_tensor_shape(tensor.name))
                dtype = torch.from_numpy(np.empty(0, tensor.dtype)).dtype
                outputs[tensor.name] = torch.empty(shape, dtype=dtype, device=self._device)
                self._context.set_tensor_address(tensor.name, outputs[tensor.name].data_ptr())
            after_input = time.perf_counter_ns()
            ran = self._context.execute_async_v3(self._stream.cuda_stream)
            self._stream.synchronize()
        after_infer = time.perf_counter_ns()
        if not ran:
            raise ServeError.internal(f"model '{self.model}': TensorRT failed to run the batch")
        arrays = {name: value.cpu().numpy() for name, value in outputs.items()}
        return EngineRun(
            arrays,
            input_ns=after_input - start,
            infer_ns=after_infer - after_input,
            output_ns=time.perf_counter_ns() - after_infer,
        )

    def close(self) -> None:
        self._context = None
        self._engine = None
        self._stream = None
