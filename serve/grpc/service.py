"""Triton's `inference.GRPCInferenceService`: every RPC converts its message and delegates to
the DataPlane; a ServeError ends the call with the status `serve.grpc.status` maps it to."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc
from google.protobuf import json_format
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from serve.dataplane_api import DataPlaneApi
from serve.errors import ServeError
from serve.grpc.codec import decode_infer_request, encode_infer_response
from serve.grpc.settings import (
    decode_log_settings,
    decode_trace_settings,
    encode_log_settings,
    encode_trace_settings,
)
from serve.grpc.status import GRPC_STATUS
from serve.grpc.stream import StreamSession
from serve.inference import Cancellation, InferResponse

log = logging.getLogger("serve.grpc")

Request = TypeVar("Request")
Response = TypeVar("Response")
Handler = Callable[[Any, Request, grpc.aio.ServicerContext], Awaitable[Response]]


async def abort(context: grpc.aio.ServicerContext, error: Exception) -> None:
    """End the call with the error's status (INTERNAL for anything but a ServeError)."""
    if isinstance(error, ServeError):
        await context.abort(GRPC_STATUS[error.kind], error.message)
    log.exception("unexpected error in a gRPC call", exc_info=error)
    await context.abort(grpc.StatusCode.INTERNAL, f"internal error: {error!r}")


def _converts_errors(handler: Handler[Request, Response]) -> Handler[Request, Response]:
    @functools.wraps(handler)
    async def call(self: Any, request: Request, context: grpc.aio.ServicerContext) -> Response:
        try:
            return await handler(self, request, context)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            await abort(context, exc)
            raise  # not reached: abort raises

    return call


def _settle(future: asyncio.Future[InferResponse | ServeError]) -> Callable[..., None]:
    """A completion callback that tolerates a call cancelled while its request ran."""

    def done(result: InferResponse | ServeError) -> None:
        if not future.done():
            future.set_result(result)

    return done


class InferenceServicer(service_pb2_grpc.GRPCInferenceServiceServicer):
    """Every RPC of GRPCInferenceService as a coroutine delegating to the DataPlane: grpcio's server
    runs them all, the native front end all but ModelInfer and ModelStreamInfer."""

    def __init__(self, dataplane: DataPlaneApi) -> None:
        self._dataplane = dataplane

    # -- health and metadata ------------------------------------------------------------------

    async def ServerLive(
        self, request: pb.ServerLiveRequest, context: grpc.aio.ServicerContext
    ) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=self._dataplane.live())

    async def ServerReady(
        self, request: pb.ServerReadyRequest, context: grpc.aio.ServicerContext
    ) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=self._dataplane.ready())

    @_converts_errors
    async def ModelReady(
        self, request: pb.ModelReadyRequest, context: grpc.aio.ServicerContext
    ) -> pb.ModelReadyResponse:
        return pb.ModelReadyResponse(
            ready=self._dataplane.model_ready(request.name, request.version)
        )

    @_converts_errors
    async def ServerMetadata(
        self, request: pb.ServerMetadataRequest, context: grpc.aio.ServicerContext
    ) -> pb.ServerMetadataResponse:
        return json_format.ParseDict(self._dataplane.server_metadata(), pb.ServerMetadataResponse())

    @_converts_errors
    async def ModelMetadata(
        self, request: pb.ModelMetadataRequest, context: grpc.aio.ServicerContext
    ) -> pb.ModelMetadataResponse:
        metadata = self._dataplane.model_metadata(request.name, request.version)
        return json_format.ParseDict(metadata, pb.ModelMetadataResponse())

    @_converts_errors
    async def ModelConfig(
        self, request: pb.ModelConfigRequest, context: grpc.aio.ServicerContext
    ) -> pb.ModelConfigResponse:
        config = self._dataplane.model_config_message(request.name, request.version)
        return pb.ModelConfigResponse(config=config)

    @_converts_errors
    async def ModelStatistics(
        self, request: pb.ModelStatisticsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ModelStatisticsResponse:
        statistics = self._dataplane.statistics(request.name, request.version)
        return json_format.ParseDict(statistics, pb.ModelStatisticsResponse())

    # -- inference ----------------------------------------------------------------------------

    async def ModelInfer(
        self, request: pb.ModelInferRequest, context: grpc.aio.ServicerContext
    ) -> pb.ModelInferResponse:
        try:
            infer = decode_infer_request(request)
            infer.cancellation = cancellation = Cancellation()
            future: asyncio.Future[InferResponse | ServeError] = (
                asyncio.get_running_loop().create_future()
            )
            self._dataplane.submit(infer, _settle(future), endpoint="ModelInfer RPC")
            try:
                result = await future
            except asyncio.CancelledError:  # grpc.aio: the client cancelled or went away
                cancellation.cancel()
                raise
            if isinstance(result, ServeError):
                raise result
            return encode_infer_response(result, infer)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            await abort(context, exc)
            raise  # not reached: abort raises

    async def ModelStreamInfer(
        self,
        request_iterator: AsyncIterator[pb.ModelInferRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[pb.ModelStreamInferResponse]:
        # grpc.aio serves a streaming handler only when it is itself an async generator.
        async for response in StreamSession(self._dataplane).responses(request_iterator):
            yield response

    # -- model repository ---------------------------------------------------------------------

    @_converts_errors
    async def RepositoryIndex(
        self, request: pb.RepositoryIndexRequest, context: grpc.aio.ServicerContext
    ) -> pb.RepositoryIndexResponse:
        index = self._dataplane.repository_index(request.ready)
        return json_format.ParseDict({"models": index}, pb.RepositoryIndexResponse())

    @_converts_errors
    async def RepositoryModelLoad(
        self, request: pb.RepositoryModelLoadRequest, context: grpc.aio.ServicerContext
    ) -> pb.RepositoryModelLoadResponse:
        parameters: dict[str, Any] = {}
        for key, parameter in request.parameters.items():
            choice = parameter.WhichOneof("parameter_choice")
            if choice is None:
                raise ServeError.invalid(f"load parameter '{key}' has no value")
            parameters[key] = getattr(parameter, choice)
        await self._dataplane.load_model(request.model_name, parameters)
        return pb.RepositoryModelLoadResponse()

    @_converts_errors
    async def RepositoryModelUnload(
        self, request: pb.RepositoryModelUnloadRequest, context: grpc.aio.ServicerContext
    ) -> pb.RepositoryModelUnloadResponse:
        dependents = request.parameters.get("unload_dependents")
        await self._dataplane.unload_model(
            request.model_name,
            unload_dependents=dependents is not None and dependents.bool_param,
        )
        return pb.RepositoryModelUnloadResponse()

    # -- shared memory ------------------------------------------------------------------------

    @_converts_errors
    async def SystemSharedMemoryStatus(
        self, request: pb.SystemSharedMemoryStatusRequest, context: grpc.aio.ServicerContext
    ) -> pb.SystemSharedMemoryStatusResponse:
        response = pb.SystemSharedMemoryStatusResponse()
        for region in self._dataplane.shm_status(request.name):
            response.regions[region["name"]].CopyFrom(
                pb.SystemSharedMemoryStatusResponse.RegionStatus(**region)
            )
        return response

    @_converts_errors
    async def SystemSharedMemoryRegister(
        self, request: pb.SystemSharedMemoryRegisterRequest, context: grpc.aio.ServicerContext
    ) -> pb.SystemSharedMemoryRegisterResponse:
        self._dataplane.shm_register(request.name, request.key, request.offset, request.byte_size)
        return pb.SystemSharedMemoryRegisterResponse()

    @_converts_errors
    async def SystemSharedMemoryUnregister(
        self, request: pb.SystemSharedMemoryUnregisterRequest, context: grpc.aio.ServicerContext
    ) -> pb.SystemSharedMemoryUnregisterResponse:
        self._dataplane.shm_unregister(request.name)
        return pb.SystemSharedMemoryUnregisterResponse()

    @_converts_errors
    async def CudaSharedMemoryStatus(
        self, request: pb.CudaSharedMemoryStatusRequest, context: grpc.aio.ServicerContext
    ) -> pb.CudaSharedMemoryStatusResponse:
        response = pb.CudaSharedMemoryStatusResponse()
        for region in self._dataplane.cuda_shm_status(request.name):
            response.regions[region["name"]].CopyFrom(
                pb.CudaSharedMemoryStatusResponse.RegionStatus(**region)
            )
        return response

    @_converts_errors
    async def CudaSharedMemoryRegister(
        self, request: pb.CudaSharedMemoryRegisterRequest, context: grpc.aio.ServicerContext
    ) -> pb.CudaSharedMemoryRegisterResponse:
        self._dataplane.cuda_shm_register(
            request.name, request.raw_handle, request.device_id, request.byte_size
        )
        return pb.CudaSharedMemoryRegisterResponse()

    @_converts_errors
    async def CudaSharedMemoryUnregister(
        self, request: pb.CudaSharedMemoryUnregisterRequest, context: grpc.aio.ServicerContext
    ) -> pb.CudaSharedMemoryUnregisterResponse:
        self._dataplane.cuda_shm_unregister(request.name)
        return pb.CudaSharedMemoryUnregisterResponse()

    # -- trace and log settings ---------------------------------------------------------------

    @_converts_errors
    async def TraceSetting(
        self, request: pb.TraceSettingRequest, context: grpc.aio.ServicerContext
    ) -> pb.TraceSettingResponse:
        update = decode_trace_settings(request.settings)
        settings = self._dataplane.trace_setting(request.model_name, update)
        return encode_trace_settings(settings)

    @_converts_errors
    async def LogSettings(
        self, request: pb.LogSettingsRequest, context: grpc.aio.ServicerContext
    ) -> pb.LogSettingsResponse:
        settings = self._dataplane.log_settings(decode_log_settings(request.settings))
        return encode_log_settings(settings)
