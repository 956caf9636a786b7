"""The gRPC endpoint: a grpc.aio server on the running event loop serving
`inference.GRPCInferenceService` over the DataPlane (`--grpc-front-end grpcio`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from tritonclient.grpc import service_pb2_grpc

from serve.dataplane_api import DataPlaneApi
from serve.grpc.limits import GrpcLimits
from serve.grpc.service import InferenceServicer
from serve.restricted import RestrictedApis, Restriction

# Calls in flight when the server stops get this long to finish; then they are cancelled
# (an open stream would otherwise hold the shutdown for as long as its client keeps it).
STOP_GRACE_S = 10.0


class GrpcEndpoint:
    """The gRPC endpoint on grpcio's aio server (`--grpc-front-end grpcio`), with restricted methods
    refused by an interceptor; `start` returns the address and port bound."""

    name = "GRPCInferenceService"

    def __init__(
        self,
        dataplane: DataPlaneApi,
        address: str,
        port: int,
        limits: GrpcLimits,
        restricted: RestrictedApis | None = None,
    ) -> None:
        self._dataplane = dataplane
        self._restricted = restricted or RestrictedApis()
        self._address = address
        self._port = port
        self._options = [
            ("grpc.max_receive_message_length", limits.max_message_bytes),
            ("grpc.max_send_message_length", limits.max_message_bytes),
            ("grpc.max_concurrent_streams", limits.max_streams),
            # Without this grpcio binds with SO_REUSEPORT: a second server on a port in use
            # would start and share it instead of failing.
            ("grpc.so_reuseport", 0),
        ]
        self._server: grpc.aio.Server | None = None

    async def start(self) -> tuple[str, int]:
        interceptors = [_RestrictedMethods(self._restricted)] if self._restricted else []
        server = grpc.aio.server(options=self._options, interceptors=interceptors)
        service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(
            InferenceServicer(self._dataplane), server
        )
        host = f"[{self._address}]" if ":" in self._address else self._address
        try:
            port = server.add_insecure_port(f"{host}:{self._port}")
        except RuntimeError as exc:
            raise OSError(f"{self.name} cannot bind {host}:{self._port}: {exc}") from None
        if port == 0:  # older grpcio reports a failed bind this way
            raise OSError(f"{self.name} cannot bind {host}:{self._port}")
        await server.start()
        self._server = server
        return self._address, port

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(STOP_GRACE_S)
            self._server = None


class _RestrictedMethods(grpc.aio.ServerInterceptor):
    """Calls to a restricted method without its key end PERMISSION_DENIED."""

    def __init__(self, restricted: RestrictedApis) -> None:
        self._restricted = restricted

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        restriction = self._restricted.for_grpc(details.method)
        if handler is None or restriction is None:
            return handler
        metadata = details.invocation_metadata or ()
        presented = next((value for key, value in metadata if key == restriction.key), None)
        if restriction.allows(presented):
            return handler
        return _refusing(handler, restriction)


def _refusing(handler: grpc.RpcMethodHandler, restriction: Restriction) -> grpc.RpcMethodHandler:
    async def refuse(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, restriction.refusal)

    codecs = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(refuse, **codecs)
    return grpc.unary_unary_rpc_method_handler(refuse, **codecs)
