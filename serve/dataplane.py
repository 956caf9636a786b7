"""The protocol-neutral core that every transport delegates to.

Health, metadata, config, inference, statistics and the repository API, in plain Python values
(dicts ready to be serialized); transports only convert wire formats and map `ServeError`.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

import serve
from protocol.datatypes import config_to_wire
from protocol.metadata import ModelMetadata, TensorMetadata
from serve.backends.registry import backend_name
from serve.config.model_config import config_from_json, config_to_json
from serve.custom_metrics import CustomMetrics
from serve.errors import ServeError
from serve.inference import InferRequest, InferResponse
from serve.log_settings import LogSettings, LogValue
from serve.model.loader import ServerServices
from serve.model.response_cache import ResponseCache
from serve.model.served import ResponseCallback, ServedModel, StreamCallback
from serve.model_calls import DataPlaneCalls
from serve.repository.manager import ModelRepository, poll_failure
from serve.scheduler.rate_limiter import RateLimiter
from serve.shared_memory.registry import SharedMemoryRegistry
from serve.shared_memory.tensors import bind_regions, uses_shared_memory
from serve.trace.settings import DEFAULTS, TraceValues
from serve.trace.tracer import Tracer

SERVER_NAME = "autotune"
# Triton 2.51's list, in its order (generate is served but, as there, not listed).
EXTENSIONS = [
    "classification",
    "sequence",
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "system_shared_memory",
    "cuda_shared_memory",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
]


def _tensor_metadata(tensor: mc.ModelInput | mc.ModelOutput, batched: bool) -> TensorMetadata:
    dims = list(tensor.dims)
    return TensorMetadata(
        tensor.name,
        config_to_wire(mc.DataType.Name(tensor.data_type)),
        [-1, *dims] if batched else dims,
    )


def _file_contents(key: str, value: Any) -> bytes:
    """A "file:<path>" load parameter's contents: raw bytes, or base64 text."""
    if isinstance(value, bytes):
        return value
    if not isinstance(value, str):
        raise ServeError.invalid(f"load parameter '{key}' must be bytes or base64 text")
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:
        raise ServeError.invalid(f"load parameter '{key}' is not valid base64") from None


class DataPlane:
    """One per server: every transport calls it with plain values and gets plain values back, or a
    ServeError. It holds what is server-wide (model repository, shared-memory regions, trace
    and log settings, custom metrics, response cache); it is called on the event loop's thread."""

    def __init__(
        self,
        repository: ModelRepository,
        *,
        server_id: str = SERVER_NAME,
        strict_readiness: bool = True,
        log_settings: LogSettings | None = None,
        trace_defaults: TraceValues = DEFAULTS,
        response_cache: ResponseCache | None = None,
        rate_limiter: RateLimiter | None = None,
    ) -> None:
        self.repository = repository
        self.accepting = True
        self.server_id = server_id
        self.strict_readiness = strict_readiness
        self.tracer = Tracer(trace_defaults)
        self.logs = log_settings or LogSettings()
        self.shared_memory = SharedMemoryRegistry()
        self.custom_metrics = CustomMetrics()  # what python models define, shown in /metrics
        self.response_cache = response_cache  # --cache-config; models enable it in their config
        repository.services = ServerServices(
            DataPlaneCalls(self), self.custom_metrics, response_cache, rate_limiter
        )

    # -- health and metadata ------------------------------------------------------------------

    def live(self) -> bool:
        return True

    def ready(self) -> bool:
        """Strict readiness (tritonserver's default): ready only while every model the server
        should serve is ready; otherwise ready while live and accepting."""
        if not self.accepting:
            return False
        return not self.strict_readiness or self.repository.all_ready()

    def server_metadata(self) -> dict[str, Any]:
        return {"name": self.server_id, "version": serve.__version__, "extensions": EXTENSIONS}

    def model_ready(self, name: str, version: str = "") -> bool:
        try:
            model = self.repository.get(name, version)
        except ServeError:
            return False
        return model.ready()

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        model = self.repository.get(name, version)
        config = model.config
        batched = config.max_batch_size > 0
        versions = [version] if version else [str(v) for v in self.repository.ready_versions(name)]
        return ModelMetadata(
            name=name,
            versions=versions,
            platform=config.platform or backend_name(config),
            inputs=[_tensor_metadata(t, batched) for t in config.input],
            outputs=[_tensor_metadata(t, batched) for t in config.output],
        ).to_json()

    def model_config(self, name: str, version: str = "") -> dict[str, Any]:
        return config_to_json(self.model_config_message(name, version))

    def model_config_message(self, name: str, version: str = "") -> mc.ModelConfig:
        """The model's configuration as the protobuf message itself (the caller must not
        change it)."""
        return self.repository.get(name, version).config

    # -- inference ----------------------------------------------------------------------------

    def submit(
        self, request: InferRequest, on_done: ResponseCallback, *, endpoint: str = "HTTP end point"
    ) -> None:
        """Queue a request; raises ServeError for what is wrong before it is queued. `endpoint`
        names the caller in the error for a decoupled model (it needs `submit_stream`)."""
        if not self.accepting:
            raise ServeError.unavailable("the server is shutting down")
        model = self.repository.get(request.model_name, request.model_version)
        if model.decoupled:  # UNSUPPORTED as tritonserver answers: 501 / UNIMPLEMENTED
            raise ServeError.unsupported(
                f"{endpoint} doesn't support models with decoupled transaction policy: model"
                f" '{model.name}' may send any number of responses; use the gRPC ModelStreamInfer"
                " RPC (streaming)"
            )
        self._submit_traced(model, request, on_done)

    def submit_stream(self, request: InferRequest, on_response: StreamCallback) -> None:
        """Queue a request whose answer may be many responses: `on_response(result, final)`
        gets each (None: a final flag with no response). A model that is not decoupled answers
        once, final."""
        if not self.accepting:
            raise ServeError.unavailable("the server is shutting down")
        model = self.repository.get(request.model_name, request.model_version)
        if not model.decoupled:
            self._submit_traced(model, request, lambda result: on_response(result, True))
            return
        if uses_shared_memory(request):
            raise ServeError.invalid(
                f"model '{model.name}': shared-memory tensors are not supported with decoupled"
                " models"
            )
        model.submit_stream(request, on_response)

    def _submit_traced(
        self, model: ServedModel, request: InferRequest, on_done: ResponseCallback
    ) -> None:
        if self.tracer.active:
            on_done = self.tracer.attach(request, model.version, on_done)
            try:
                self._submit(model, request, on_done)
            except BaseException:
                self.tracer.detach(request)
                raise
            return
        self._submit(model, request, on_done)

    def _submit(self, model: ServedModel, request: InferRequest, on_done: ResponseCallback) -> None:
        if not uses_shared_memory(request):
            model.submit(request, on_done)
            return
        on_done, release = bind_regions(self.shared_memory, request, on_done)
        try:
            model.submit(request, on_done)
        except BaseException:
            release()
            raise

    async def infer(self, request: InferRequest) -> InferResponse:
        future: asyncio.Future[InferResponse | ServeError] = (
            asyncio.get_running_loop().create_future()
        )
        self.submit(request, future.set_result)
        result = await future
        if isinstance(result, ServeError):
            raise result
        return result

    # -- shared memory ------------------------------------------------------------------------

    def shm_status(self, name: str = "") -> list[dict[str, Any]]:
        """System shared-memory regions: [{"name", "key", "offset", "byte_size"}]."""
        return self.shared_memory.status(name)

    def shm_register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        self.shared_memory.register(name, key, offset, byte_size)

    def shm_unregister(self, name: str = "") -> None:
        """Unregister one region ("" = all); an unknown name is not an error, as in Triton."""
        self.shared_memory.unregister(name)

    def cuda_shm_status(self, name: str = "") -> list[dict[str, Any]]:
        """CUDA shared-memory regions: [{"name", "device_id", "byte_size"}]."""
        return self.shared_memory.status(name, "cuda")

    def cuda_shm_register(self, name: str, raw_handle: Any, device_id: int, byte_size: int) -> None:
        """Open a client's CUDA IPC handle (bytes, or HTTP's {"b64": ...}) as region `name`;
        where CUDA cannot be had, a ServeError naming the region says why."""
        self.shared_memory.register_cuda(name, raw_handle, device_id, byte_size)

    def cuda_shm_unregister(self, name: str = "") -> None:
        self.shared_memory.unregister(name, "cuda")

    # -- trace and log settings ---------------------------------------------------------------

    def trace_setting(
        self, model: str, update: dict[str, list[str] | None]
    ) -> dict[str, list[str]]:
        """Read (empty `update`) or change the trace settings of `model` ("" = global); values
        are lists of strings, None clears a model's value back to the global one."""
        if model and not self.repository.knows(model):
            raise ServeError.not_found(f"Request for unknown model: '{model}' is not found")
        return self.tracer.update(model, update) if update else self.tracer.setting(model)

    def log_settings(self, update: dict[str, LogValue]) -> dict[str, LogValue]:
        """Read (empty `update`) or change the logging settings."""
        return self.logs.update(update)

    # -- statistics ---------------------------------------------------------------------------

    def statistics(self, name: str = "", version: str = "") -> dict[str, Any]:
        if name:
            if version:
                models = [self.repository.get(name, version)]
            else:
                self.repository.get(name)  # raises for unknown or unavailable models
                models = [m for m in self.repository.loaded() if m.name == name]
        else:
            models = self.repository.loaded()
        return {"model_stats": [m.stats.to_json() for m in models]}

    # -- repository ---------------------------------------------------------------------------

    def repository_index(self, ready_only: bool = False) -> list[dict[str, str]]:
        return self.repository.index(ready_only)

    async def load_model(self, name: str, parameters: dict[str, Any] | None = None) -> None:
        """Load or reload; `parameters` may hold "config" (ModelConfig JSON) and "file:<path>"
        entries (the file's contents: raw bytes, as gRPC sends them, or base64 text, as HTTP
        sends them), as in Triton's model repository extension."""
        self.repository.check_control()
        override = None
        files: dict[str, bytes] = {}
        try:
            for key, value in (parameters or {}).items():
                if key == "config":
                    if not isinstance(value, str):
                        raise ServeError.invalid("load parameter 'config' must be a JSON string")
                    try:
                        override = config_from_json(value, "its config override")
                    except ServeError as exc:  # Triton: the model could not be polled
                        raise poll_failure(name, exc.message) from None
                elif key.startswith("file:"):
                    files[key.removeprefix("file:")] = _file_contents(key, value)
                else:
                    raise ServeError.invalid(f"unknown load parameter '{key}'")
        except ServeError as exc:  # worded as Triton's clients expect a failed load
            if exc.message.startswith(f"failed to load '{name}'"):
                raise
            raise ServeError(exc.kind, f"failed to load '{name}': {exc.message}") from None
        await self.repository.load(name, override, files or None)

    async def unload_model(self, name: str, *, unload_dependents: bool = False) -> None:
        """Unload; `unload_dependents` also unloads an ensemble's composing models that no
        other loaded ensemble uses (Triton's model_repository(unload_dependents))."""
        self.repository.check_control()
        await self.repository.unload(name, unload_dependents=unload_dependents)
