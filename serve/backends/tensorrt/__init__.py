"""The tensorrt backend: serialized TensorRT engines (`model.plan`, platform `tensorrt_plan`),
on GPUs only, one execution context and CUDA stream per instance (docs/gpu.md)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from serve.backends.base import Backend, InstanceContext, ModelInstance
from serve.backends.tensorrt.engine_io import complete_config
from serve.backends.tensorrt.runtime import deserialize, missing_runtime
from serve.errors import ServeError
from serve.platform import ServingPlatform, detect_platform


class TensorRTBackend(Backend):
    """Models of platform tensorrt_plan (`model.plan`): GPU instances only, each needing TensorRT
    and a CUDA build of torch."""

    name = "tensorrt"
    default_model_filename = "model.plan"
    platforms = ("tensorrt_plan",)

    def gpu_unavailable_reason(self, platform: ServingPlatform) -> str | None:
        if not platform.gpus:
            return "no GPU is visible"
        return missing_runtime()

    def autocomplete(
        self, config: mc.ModelConfig, model_path: Path, settings: Mapping[str, str] | None = None
    ) -> None:
        """Inputs, outputs and max_batch_size from the engine, as Triton's tensorrt backend
        completes them. Reading an engine needs a GPU and TensorRT: without them a config that
        declares everything is taken as it is, one that does not is refused, saying why."""
        if not config.platform and not config.backend:
            config.platform = "tensorrt_plan"
        if not config.backend:
            config.backend = "tensorrt"
        if not model_path.is_file():
            return  # loading reports the missing file
        reason = self.gpu_unavailable_reason(detect_platform())
        if reason is not None:
            if _declares_everything(config):
                return
            raise ServeError.unavailable(
                f"{model_path}: a TensorRT engine is read only on a GPU with TensorRT ({reason}); "
                "declare its inputs and outputs in config.pbtxt to load it elsewhere"
            )
        engine, io = deserialize(model_path, 0)
        del engine
        complete_config(config, io, str(model_path.parent.parent / "config.pbtxt"))

    def create_instance(self, context: InstanceContext) -> ModelInstance:
        from serve.backends.tensorrt.instance import TensorRTInstance

        return TensorRTInstance(context)


def _declares_everything(config: mc.ModelConfig) -> bool:
    tensors = (*config.input, *config.output)
    return (
        bool(config.input)
        and bool(config.output)
        and all(t.data_type != mc.TYPE_INVALID and t.dims for t in tensors)
    )
