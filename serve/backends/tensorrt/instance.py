"""One TensorRT instance: the engine on its GPU (`EngineRunner`: one execution context on
profile 0, one CUDA stream). A batch's inputs go to the GPU, the engine runs with the batch's
shapes, the outputs come back; shapes outside the profile are refused naming the input."""

from __future__ import annotations

from collections.abc import Sequence

from serve.backends.base import BatchTimes, InstanceContext, ModelInstance, RequestResult
from serve.backends.batching import batch_rows, concat_inputs, split_outputs
from serve.backends.tensorrt.runner import EngineRunner
from serve.errors import ServeError
from serve.inference import InferRequest


class TensorRTInstance(ModelInstance):
    """An instance of a plan model: its `EngineRunner` on the instance's GPU. Refused unless
    KIND_GPU; a batch whose shapes the profile does not cover fails every request of it."""

    def __init__(self, context: InstanceContext) -> None:
        super().__init__(context)
        self._runner: EngineRunner | None = None
        self._batched = context.config.max_batch_size > 0

    def load(self) -> None:
        ctx = self.context
        if ctx.kind != "KIND_GPU":
            raise ServeError.unavailable(
                f"model '{ctx.model_name}': the tensorrt backend runs on GPUs only (instance "
                f"{ctx.instance_name} is {ctx.kind})"
            )
        self._runner = EngineRunner(ctx.model_path, ctx.device_id, ctx.model_name)

    def execute(self, requests: Sequence[InferRequest], times: BatchTimes) -> list[RequestResult]:
        if self._runner is None:
            raise ServeError.unavailable(f"model '{self.context.model_name}' is not loaded")
        rows = [batch_rows(r) for r in requests] if self._batched else [1]
        feeds = concat_inputs(requests) if self._batched else dict(requests[0].inputs)
        try:
            run = self._runner.run(feeds)
        except ServeError as refused:
            return [refused] * len(requests)
        wanted = {o.name for o in self.context.config.output} or set(run.outputs)
        arrays = {name: run.outputs[name] for name in wanted}
        results: list[RequestResult] = (
            list(split_outputs(arrays, rows)) if self._batched else [arrays]
        )
        times.compute_input_ns = run.input_ns
        times.compute_infer_ns = run.infer_ns
        times.compute_output_ns = run.output_ns
        return results

    def unload(self) -> None:
        if self._runner is not None:
            self._runner.close()
        self._runner = None
