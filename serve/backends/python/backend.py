"""The python backend: Triton python models (`model.py`), one stub process per instance."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from serve.backends.base import Backend, InstanceContext, ModelInstance
from serve.backends.python.autocomplete import autocomplete_python_config
from serve.backends.python.instance import PythonModelInstance
from serve.platform import ServingPlatform


class PythonBackend(Backend):
    """Triton python models: the config completed by the model's own `auto_complete_config` (in a
    child process), each instance a stub process."""

    name = "python"
    default_model_filename = "model.py"

    def autocomplete(
        self, config: mc.ModelConfig, model_path: Path, settings: Mapping[str, str] | None = None
    ) -> None:
        autocomplete_python_config(config, model_path)

    def gpu_unavailable_reason(self, platform: ServingPlatform) -> str | None:
        # As in Triton: the model itself uses the GPU it is given (model_instance_device_id).
        return None if platform.gpus else "no GPU is visible"

    def create_instance(self, context: InstanceContext) -> ModelInstance:
        return PythonModelInstance(context)
