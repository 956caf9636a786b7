"""One small client interface over Triton's three Python clients (tritonclient.http,
tritonclient.grpc, tritonclient.grpc.aio), so that the contract suite is written once.

Answers come back as Triton's own protobuf messages (service_pb2, model_config_pb2): gRPC's as
they arrive, HTTP's JSON parsed into the same messages strictly, so a field that HTTP names or
types differently from the schema fails the parse. Errors come back as `ContractError` with the
kind the transport's status stands for: HTTP status and gRPC code each map to one kind here,
written down independently of the server's own tables."""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
import tritonclient.http as httpclient
from google.protobuf import json_format
from google.protobuf.message import Message
from tritonclient.grpc import model_config_pb2, service_pb2
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from serve.errors import ErrorKind

TRANSPORTS = ("http", "grpc", "grpc_aio")

# Statuses as tritonserver's HTTP front end answers them (400 also for an existing name).
HTTP_KINDS = {
    "400": frozenset({ErrorKind.INVALID_ARGUMENT, ErrorKind.ALREADY_EXISTS}),
    "501": frozenset({ErrorKind.UNSUPPORTED}),
    "404": frozenset({ErrorKind.NOT_FOUND}),
    "500": frozenset({ErrorKind.INTERNAL}),
    "503": frozenset({ErrorKind.UNAVAILABLE}),
}
GRPC_KINDS = {
    str(code): frozenset({kind})
    for code, kind in (
        (grpc.StatusCode.INVALID_ARGUMENT, ErrorKind.INVALID_ARGUMENT),
        (grpc.StatusCode.UNIMPLEMENTED, ErrorKind.UNSUPPORTED),
        (grpc.StatusCode.NOT_FOUND, ErrorKind.NOT_FOUND),
        (grpc.StatusCode.ALREADY_EXISTS, ErrorKind.ALREADY_EXISTS),
        (grpc.StatusCode.INTERNAL, ErrorKind.INTERNAL),
        (grpc.StatusCode.UNAVAILABLE, ErrorKind.UNAVAILABLE),
    )
}

M = TypeVar("M", bound=Message)
T = TypeVar("T")


class ContractError(Exception):
    """A request the server refused: its status, the kinds that status stands for, its message."""

    def __init__(self, kinds: frozenset[ErrorKind], status: str, message: str) -> None:
        super().__init__(f"[{status}] {message}")
        self.kinds = kinds  # empty: a status no kind stands for
        self.status = status
        self.message = message

    def means(self, kind: ErrorKind) -> bool:
        return kind in self.kinds


@dataclass(frozen=True, slots=True)
class Output:
    datatype: str
    shape: list[int]
    array: np.ndarray


@dataclass(frozen=True, slots=True)
class InferAnswer:
    model_name: str
    model_version: str
    id: str
    outputs: dict[str, Output]


class ContractClient(abc.ABC):
    """The operations the suite needs; one subclass per transport."""

    transport: str

    @abc.abstractmethod
    def close(self) -> None: ...

    @abc.abstractmethod
    def server_live(self) -> bool: ...

    @abc.abstractmethod
    def server_ready(self) -> bool: ...

    @abc.abstractmethod
    def model_ready(self, model: str, version: str = "") -> bool: ...

    @abc.abstractmethod
    def server_metadata(self) -> service_pb2.ServerMetadataResponse: ...

    @abc.abstractmethod
    def model_metadata(
        self, model: str, version: str = ""
    ) -> service_pb2.ModelMetadataResponse: ...

    @abc.abstractmethod
    def model_config(self, model: str, version: str = "") -> model_config_pb2.ModelConfig: ...

    @abc.abstractmethod
    def statistics(
        self, model: str = "", version: str = ""
    ) -> service_pb2.ModelStatisticsResponse: ...

    @abc.abstractmethod
    def repository_index(self) -> list[service_pb2.RepositoryIndexResponse.ModelIndex]: ...

    @abc.abstractmethod
    def load(self, model: str, config: model_config_pb2.ModelConfig | None = None) -> None: ...

    @abc.abstractmethod
    def unload(self, model: str) -> None: ...

    @abc.abstractmethod
    def infer(
        self,
        model: str,
        inputs: Mapping[str, np.ndarray],
        outputs: Sequence[str] | None = None,
        *,
        version: str = "",
        request_id: str = "",
        class_count: int = 0,
    ) -> InferAnswer:
        """Infer with each array sent as the tensor of that name (its datatype from the array's
        dtype); `outputs` None asks for every output; `class_count` applies to each requested."""
        ...


def _config_json(config: model_config_pb2.ModelConfig | None) -> str | None:
    if config is None:
        return None
    return json_format.MessageToJson(config, preserving_proto_field_name=True)


def _error(
    exc: InferenceServerException, kinds: Mapping[str, frozenset[ErrorKind]]
) -> ContractError:
    status = str(exc.status())
    return ContractError(kinds.get(status, frozenset()), status, str(exc.message()))


class HttpContract(ContractClient):
    transport = "http"

    def __init__(self, url: str) -> None:
        self._client = httpclient.InferenceServerClient(url, network_timeout=120)

    def _call(self, method: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        try:
            return method(*args, **kwargs)
        except InferenceServerException as exc:
            raise _error(exc, HTTP_KINDS) from None

    def _parsed(self, message: type[M], value: object) -> M:
        return json_format.ParseDict(value, message())

    def close(self) -> None:
        self._client.close()

    def server_live(self) -> bool:
        return bool(self._call(self._client.is_server_live))

    def server_ready(self) -> bool:
        return bool(self._call(self._client.is_server_ready))

    def model_ready(self, model: str, version: str = "") -> bool:
        return bool(self._call(self._client.is_model_ready, model, version))

    def server_metadata(self) -> service_pb2.ServerMetadataResponse:
        body = self._call(self._client.get_server_metadata)
        return self._parsed(service_pb2.ServerMetadataResponse, body)

    def model_metadata(self, model: str, version: str = "") -> service_pb2.ModelMetadataResponse:
        body = self._call(self._client.get_model_metadata, model, version)
        return self._parsed(service_pb2.ModelMetadataResponse, body)

    def model_config(self, model: str, version: str = "") -> model_config_pb2.ModelConfig:
        body = self._call(self._client.get_model_config, model, version)
        return self._parsed(model_config_pb2.ModelConfig, body)

    def statistics(self, model: str = "", version: str = "") -> service_pb2.ModelStatisticsResponse:
        body = self._call(self._client.get_inference_statistics, model, version)
        return self._parsed(service_pb2.ModelStatisticsResponse, body)

    def repository_index(self) -> list[service_pb2.RepositoryIndexResponse.ModelIndex]:
        body = self._call(self._client.get_model_repository_index)
        return list(self._parsed(service_pb2.RepositoryIndexResponse, {"models": body}).models)

    def load(self, model: str, config: model_config_pb2.ModelConfig | None = None) -> None:
        self._call(self._client.load_model, model, config=_config_json(config))

    def unload(self, model: str) -> None:
        self._call(self._client.unload_model, model)

    def infer(
        self,
        model: str,
        inputs: Mapping[str, np.ndarray],
        outputs: Sequence[str] | None = None,
        *,
        version: str = "",
        request_id: str = "",
        class_count: int = 0,
    ) -> InferAnswer:
        tensors = []
        for name, array in inputs.items():
            tensor = httpclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
            tensor.set_data_from_numpy(array, binary_data=True)
            tensors.append(tensor)
        requested = None
        if outputs is not None:
            requested = [
                httpclient.InferRequestedOutput(o, class_count=class_count) for o in outputs
            ]
        result = self._call(
            self._client.infer,
            model,
            tensors,
            model_version=version,
            outputs=requested,
            request_id=request_id,
        )
        response = result.get_response()
        return InferAnswer(
            model_name=response["model_name"],
            model_version=response["model_version"],
            id=response.get("id", ""),
            outputs={
                o["name"]: Output(o["datatype"], list(o["shape"]), result.as_numpy(o["name"]))
                for o in response["outputs"]
            },
        )


class GrpcContract(ContractClient):
    """tritonclient.grpc; GrpcAioContract reuses it, running each coroutine to completion."""

    transport = "grpc"

    def __init__(self, url: str) -> None:
        self._client: Any = grpcclient.InferenceServerClient(url)

    def _call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except InferenceServerException as exc:
            raise _error(exc, GRPC_KINDS) from None

    def close(self) -> None:
        self._call(self._client.close)

    def server_live(self) -> bool:
        return bool(self._call(self._client.is_server_live))

    def server_ready(self) -> bool:
        return bool(self._call(self._client.is_server_ready))

    def model_ready(self, model: str, version: str = "") -> bool:
        return bool(self._call(self._client.is_model_ready, model, version))

    def server_metadata(self) -> service_pb2.ServerMetadataResponse:
        return self._call(self._client.get_server_metadata)

    def model_metadata(self, model: str, version: str = "") -> service_pb2.ModelMetadataResponse:
        return self._call(self._client.get_model_metadata, model, version)

    def model_config(self, model: str, version: str = "") -> model_config_pb2.ModelConfig:
        return self._call(self._client.get_model_config, model, version).config

    def statistics(self, model: str = "", version: str = "") -> service_pb2.ModelStatisticsResponse:
        return self._call(self._client.get_inference_statistics, model, version)

    def repository_index(self) -> list[service_pb2.RepositoryIndexResponse.ModelIndex]:
        return list(self._call(self._client.get_model_repository_index).models)

    def load(self, model: str, config: model_config_pb2.ModelConfig | None = None) -> None:
        self._call(self._client.load_model, model, config=_config_json(config))

    def unload(self, model: str) -> None:
        self._call(self._client.unload_model, model)

    def infer(
        self,
        model: str,
        inputs: Mapping[str, np.ndarray],
        outputs: Sequence[str] | None = None,
        *,
        version: str = "",
        request_id: str = "",
        class_count: int = 0,
    ) -> InferAnswer:
        tensors = []
        for name, array in inputs.items():
            tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
            tensor.set_data_from_numpy(array)
            tensors.append(tensor)
        requested = None
        if outputs is not None:
            requested = [
                grpcclient.InferRequestedOutput(o, class_count=class_count) for o in outputs
            ]
        result = self._call(
            self._client.infer,
            model,
            tensors,
            model_version=version,
            outputs=requested,
            request_id=request_id,
        )
        response: service_pb2.ModelInferResponse = result.get_response()
        return InferAnswer(
            model_name=response.model_name,
            model_version=response.model_version,
            id=response.id,
            outputs={
                o.name: Output(o.datatype, list(o.shape), result.as_numpy(o.name))
                for o in response.outputs
            },
        )


class GrpcAioContract(GrpcContract):
    """tritonclient.grpc.aio on an event loop of its own: each call runs to completion."""

    transport = "grpc_aio"

    def __init__(self, url: str) -> None:
        self._loop = asyncio.new_event_loop()
        # grpc.aio binds its channel to the loop that is running when it is made.
        self._client = self._loop.run_until_complete(self._make(url))

    @staticmethod
    async def _make(url: str) -> aioclient.InferenceServerClient:
        return aioclient.InferenceServerClient(url)

    def _call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        call: Coroutine[Any, Any, Any] = method(*args, **kwargs)
        try:
            return self._loop.run_until_complete(call)
        except InferenceServerException as exc:
            raise _error(exc, GRPC_KINDS) from None

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._loop.close()


def open_client(transport: str, http_url: str, grpc_url: Callable[[], str]) -> ContractClient:
    if transport == "http":
        return HttpContract(http_url)
    if transport == "grpc":
        return GrpcContract(grpc_url())
    if transport == "grpc_aio":
        return GrpcAioContract(grpc_url())
    raise ValueError(f"unknown transport {transport!r}; one of {TRANSPORTS}")
