"""A small async client of Triton's `inference.GRPCInferenceService` for control calls.

The same calls, arguments and return shapes as `HttpClient` (the JSON documents Triton's HTTP
routes print, built from the gRPC responses), so a caller picks a client by protocol and uses
either the same way. A failed call raises `ClientError`: `status` is the HTTP status Triton
would have answered for the server's gRPC code, None when the server did not answer.
"""

from __future__ import annotations

import base64
from typing import Any

import grpc
from google.protobuf.message import Message
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc

from protocol.client.http import Endpoint, parse_url
from protocol.errors import ClientError
from protocol.proto_json import message_to_json

DEFAULT_PORT = 8001

# Like perf_analyzer: tensors of any size fit in a message.
CHANNEL_OPTIONS = (("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1))

# The HTTP status Triton's HTTP endpoint gives the error that a gRPC code carries.
_HTTP_STATUS = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 400,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.INTERNAL: 500,
    grpc.StatusCode.UNKNOWN: 500,
}
# The codes grpc itself raises when no server answered.
_TRANSPORT_CODES = frozenset({grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED})


def parse_grpc_url(url: str) -> Endpoint:
    """`host:port`, `host` (port 8001) or `grpc://host:port`; IPv6 hosts in brackets."""
    return parse_url(url.strip().removeprefix("grpc://"), DEFAULT_PORT)


def metadata_pairs(headers: dict[str, str] | None) -> tuple[tuple[str, str], ...]:
    """-H headers as gRPC metadata (keys lower-case, as HTTP/2 requires)."""
    return tuple((name.lower(), value) for name, value in (headers or {}).items())


def rpc_error_message(exc: grpc.aio.AioRpcError | grpc.RpcError) -> str:
    """The server's message, or grpc's own when the call never reached a server."""
    details = exc.details() if isinstance(exc, grpc.aio.AioRpcError) else str(exc)
    code = exc.code() if isinstance(exc, grpc.aio.AioRpcError) else None
    name = code.name if code is not None else "error"
    return str(details) if details else name


def is_transport_failure(exc: grpc.aio.AioRpcError, channel: grpc.aio.Channel | None) -> bool:
    """True when the call failed in transit (no server, connection lost, deadline), not
    because a server refused it. A server's own UNAVAILABLE (model not ready, queue full)
    leaves the channel connected; grpc's (refused, reset, GOAWAY) does not. The headers do not
    tell them apart: servers answer errors trailers-only, with no initial metadata."""
    code = exc.code()
    if code in _TRANSPORT_CODES:
        return True
    if code != grpc.StatusCode.UNAVAILABLE:
        return False
    return channel is None or channel.get_state() != grpc.ChannelConnectivity.READY


class GrpcClient:
    """Control calls to a Triton-compatible gRPC server over one channel."""

    def __init__(
        self, url: str, headers: dict[str, str] | None = None, timeout_s: float = 30.0
    ) -> None:
        self.endpoint = parse_grpc_url(url)
        self._metadata = metadata_pairs(headers)
        self._timeout_s = timeout_s
        self._channel: grpc.aio.Channel | None = None
        self._stub: pb_grpc.GRPCInferenceServiceStub | None = None

    async def server_metadata(self) -> dict[str, Any]:
        """ServerMetadata: the server's name, version and extensions."""
        response = await self._call("ServerMetadata", pb.ServerMetadataRequest(), "the server")
        return message_to_json(response)

    async def model_metadata(self, model: str, version: str = "") -> dict[str, Any]:
        request = pb.ModelMetadataRequest(name=model, version=version)
        return message_to_json(await self._call("ModelMetadata", request, _model(model, version)))

    async def model_config(self, model: str, version: str = "") -> dict[str, Any]:
        """The model's config as a JSON object, as Triton's HTTP /config route prints it."""
        request = pb.ModelConfigRequest(name=model, version=version)
        response = await self._call("ModelConfig", request, _model(model, version))
        return message_to_json(response.config)

    async def statistics(self, model: str = "", version: str = "") -> dict[str, Any]:
        """The statistics extension: one model's (or every model's, for model "")."""
        request = pb.ModelStatisticsRequest(name=model, version=version)
        what = _model(model, version) if model else "statistics"
        return message_to_json(await self._call("ModelStatistics", request, what))

    async def repository_index(self) -> list[dict[str, Any]]:
        """The repository extension's index: one entry per model version it knows."""
        response = await self._call(
            "RepositoryIndex", pb.RepositoryIndexRequest(), "the repository index"
        )
        models: list[dict[str, Any]] = message_to_json(response)["models"]
        return models

    async def load_model(self, model: str, parameters: dict[str, Any] | None = None) -> None:
        """Load (or reload) a model; `parameters` (such as `config`, a JSON string) go in the
        request as ModelRepositoryParameters."""
        request = pb.RepositoryModelLoadRequest(model_name=model)
        for name, value in (parameters or {}).items():
            _set_repository_parameter(request.parameters[name], name, value)
        await self._call("RepositoryModelLoad", request, f"loading model '{model}'")

    async def unload_model(self, model: str) -> None:
        request = pb.RepositoryModelUnloadRequest(model_name=model)
        await self._call("RepositoryModelUnload", request, f"unloading model '{model}'")

    async def register_system_shared_memory(
        self, name: str, key: str, byte_size: int, offset: int = 0
    ) -> None:
        """The shared-memory extension: register the POSIX region `key` as `name`."""
        request = pb.SystemSharedMemoryRegisterRequest(
            name=name, key=key, offset=offset, byte_size=byte_size
        )
        what = f"registering system shared memory region '{name}' (key {key})"
        await self._call("SystemSharedMemoryRegister", request, what)

    async def unregister_system_shared_memory(self, name: str = "") -> None:
        """Unregister the region `name` (every system region for "")."""
        what = f"unregistering system shared memory region '{name}'" if name else "unregistering"
        request = pb.SystemSharedMemoryUnregisterRequest(name=name)
        await self._call("SystemSharedMemoryUnregister", request, what)

    async def register_cuda_shared_memory(
        self, name: str, raw_handle: bytes, device_id: int, byte_size: int
    ) -> None:
        """The CUDA shared-memory extension: register the GPU memory whose cudaIpcMemHandle
        is `raw_handle` (its base64, as tritonclient's get_raw_handle gives it) as `name`."""
        request = pb.CudaSharedMemoryRegisterRequest(
            name=name,
            raw_handle=base64.b64decode(raw_handle),
            device_id=device_id,
            byte_size=byte_size,
        )
        await self._call("CudaSharedMemoryRegister", request, f"registering CUDA region '{name}'")

    async def unregister_cuda_shared_memory(self, name: str = "") -> None:
        """Unregister the CUDA region `name` (every CUDA region for "")."""
        what = f"unregistering CUDA shared memory region '{name}'" if name else "unregistering"
        request = pb.CudaSharedMemoryUnregisterRequest(name=name)
        await self._call("CudaSharedMemoryUnregister", request, what)

    async def system_shared_memory_status(self, name: str = "") -> list[dict[str, Any]]:
        """The registered system regions (one, or all for ""): name, key, offset, byte_size."""
        request = pb.SystemSharedMemoryStatusRequest(name=name)
        response = await self._call(
            "SystemSharedMemoryStatus", request, "the system shared memory status"
        )
        regions: dict[str, dict[str, Any]] = message_to_json(response)["regions"]
        return list(regions.values())

    async def close(self) -> None:
        channel, self._channel, self._stub = self._channel, None, None
        if channel is not None:
            await channel.close()

    async def _call(self, method: str, request: Message, what: str) -> Any:
        if self._stub is None:
            self._channel = grpc.aio.insecure_channel(
                self.endpoint.address, options=CHANNEL_OPTIONS
            )
            self._stub = pb_grpc.GRPCInferenceServiceStub(self._channel)
        call = getattr(self._stub, method)
        try:
            return await call(request, metadata=self._metadata, timeout=self._timeout_s)
        except grpc.aio.AioRpcError as exc:
            raise self._error(exc, method, what) from None

    def _error(self, exc: grpc.aio.AioRpcError, method: str, what: str) -> ClientError:
        address = self.endpoint.address
        message = rpc_error_message(exc)
        if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
            return ClientError(
                f"the server at {address} did not answer {method} within {self._timeout_s:g} s"
            )
        if is_transport_failure(exc, self._channel):
            return ClientError(f"cannot reach the server at {address} (gRPC): {message}")
        status = _HTTP_STATUS.get(exc.code(), 500)
        if what.startswith("model") and status in (400, 404):
            return ClientError(f"{what} is not known to the server at {address}: {message}", status)
        return ClientError(f"the server at {address} refused {method} ({what}): {message}", status)


def _model(model: str, version: str) -> str:
    return f"model '{model}'" + (f" version '{version}'" if version else "")


def _set_repository_parameter(parameter: Any, name: str, value: Any) -> None:
    if isinstance(value, bool):
        parameter.bool_param = value
    elif isinstance(value, int):
        parameter.int64_param = value
    elif isinstance(value, str):
        parameter.string_param = value
    elif isinstance(value, bytes):
        parameter.bytes_param = value
    else:
        raise ClientError(
            f"repository parameter '{name}' must be a bool, an int, a string or bytes,"
            f" got {type(value).__name__}"
        )
