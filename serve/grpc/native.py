"""`inference.GRPCInferenceService` on the HTTP/2 layer of `serve.grpc.http2`.

The two inference methods are served straight from their message bytes: a ModelInfer request
is decoded, submitted, and answered from the DataPlane's completion callback (no task per
call); a ModelStreamInfer stream submits each request as it arrives and writes each response
as it completes. Every other method runs the `InferenceServicer` coroutine, with a context
that carries `abort` as grpc.aio's does, so the methods are written once for both servers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, NoReturn

import grpc
from google.protobuf.message import DecodeError, Message
from tritonclient.grpc import service_pb2 as pb

from serve.dataplane_api import DataPlaneApi
from serve.errors import ServeError
from serve.grpc.codec import (
    decode_infer_request,
    encode_infer_response,
    encode_infer_response_wire,
    raw_output_bytes,
)
from serve.grpc.endpoint import STOP_GRACE_S
from serve.grpc.http2.calls import Call, Router, RpcMethod
from serve.grpc.http2.server import Http2GrpcServer
from serve.grpc.limits import GrpcLimits
from serve.grpc.raw_contents import parse_infer_request
from serve.grpc.service import InferenceServicer
from serve.grpc.status import GRPC_STATUS
from serve.grpc.stream import error_response, stream_answer
from serve.inference import Cancellation, InferRequest, InferResponse
from serve.restricted import RestrictedApis, Restriction
from serve.sockets import bind_tcp

log = logging.getLogger("serve.grpc")

SERVICE = "inference.GRPCInferenceService"
_INTERNAL = grpc.StatusCode.INTERNAL.value[0]
_INVALID = grpc.StatusCode.INVALID_ARGUMENT.value[0]
_STREAMING = {"ModelStreamInfer"}
# An answer whose outputs hold at least this many bytes is written from their own buffers; a
# smaller one is serialized by protobuf in one call (its Python-level framing costs more).
LARGE_ANSWER = 1 << 16


def _code(error: ServeError) -> int:
    return int(GRPC_STATUS[error.kind].value[0])


class _CallContext:
    """What the servicer's methods use of grpc.aio's ServicerContext: `abort`."""

    __slots__ = ("code", "details")

    def __init__(self) -> None:
        self.code = _INTERNAL
        self.details = ""

    async def abort(self, code: grpc.StatusCode, details: str = "") -> NoReturn:
        self.code = int(code.value[0])
        self.details = details
        raise grpc.aio.AbortError()


def _servicer_method(
    method: Callable[[Any, Any], Any], request_type: type[Message]
) -> Callable[[bytes | memoryview, Call], None]:
    def start(message: bytes | memoryview, call: Call) -> None:
        try:
            request = request_type.FromString(message)
        except DecodeError as exc:
            call.finish(_INVALID, f"malformed {request_type.__name__}: {exc}")
            return
        context = _CallContext()
        task = asyncio.ensure_future(method(request, context))
        task.add_done_callback(lambda done: _answer(done, call, context))

    return start


def _answer(task: asyncio.Future[Message], call: Call, context: _CallContext) -> None:
    if task.cancelled():
        call.finish(grpc.StatusCode.CANCELLED.value[0], "the call was cancelled")
        return
    error = task.exception()
    if error is None:
        call.respond(task.result().SerializeToString())
    elif isinstance(error, grpc.aio.AbortError):
        call.finish(context.code, context.details)
    else:
        log.error("gRPC method failed", exc_info=error)
        call.finish(_INTERNAL, f"internal error: {error!r}")


class _Infer:
    """ModelInfer from bytes to bytes, completed by the DataPlane's callback."""

    def __init__(self, dataplane: DataPlaneApi) -> None:
        self._dataplane = dataplane

    def __call__(self, message: bytes | memoryview, call: Call) -> None:
        try:
            request = decode_infer_request(*parse_infer_request(message))
            request.cancellation = cancellation = Cancellation()
            call.on_cancel = cancellation.cancel  # RST_STREAM, or the connection closed
            self._dataplane.submit(
                request, lambda result: self._done(call, request, result), endpoint="ModelInfer RPC"
            )
        except ServeError as exc:
            call.finish(_code(exc), exc.message)
        except DecodeError as exc:
            call.finish(_INVALID, f"malformed ModelInferRequest: {exc}")

    @staticmethod
    def _done(call: Call, request: InferRequest, result: InferResponse | ServeError) -> None:
        call.on_cancel = None
        if isinstance(result, ServeError):
            call.finish(_code(result), result.message)
            return
        trace = request.trace  # still open while the completion callback runs
        if trace is not None:
            trace.stamp("GRPC_SEND_START")
        try:
            if raw_output_bytes(result) >= LARGE_ANSWER:
                call.respond(encode_infer_response_wire(result, request))
            else:
                call.respond(encode_infer_response(result, request).SerializeToString())
        except ServeError as exc:
            call.finish(_code(exc), exc.message)
        if trace is not None:
            trace.stamp("GRPC_SEND_END")


class _Stream:
    """One ModelStreamInfer call: requests submitted as they arrive, each answered in the
    stream as it completes (a failed one with its error and id); the call ends OK once the
    client has stopped sending and every request has its answer."""

    def __init__(self, dataplane: DataPlaneApi, call: Call) -> None:
        self._dataplane = dataplane
        self._call = call
        self._in_flight = 0
        self._half_closed = False
        self._open: set[Cancellation] = set()  # the requests not yet answered in full

    def on_message(self, message: bytes | memoryview) -> None:
        try:
            infer, raw = parse_infer_request(message)
        except DecodeError as exc:
            self._send(pb.ModelStreamInferResponse(error_message=f"malformed request: {exc}"))
            return
        self._in_flight += 1
        cancellation = Cancellation()
        self._open.add(cancellation)
        try:
            request = decode_infer_request(infer, raw)
            request.cancellation = cancellation
            self._dataplane.submit_stream(
                request, lambda result, final: self._done(infer, request, result, final)
            )
        except ServeError as exc:
            self._in_flight -= 1
            self._open.discard(cancellation)
            self._send(error_response(infer, exc.message))

    def on_half_close(self) -> None:
        self._half_closed = True
        if self._in_flight == 0:
            self._call.finish(0)

    def on_cancel(self) -> None:
        self._half_closed = True
        # The stream is gone: its open requests are cancelled (a decoupled model's too).
        for cancellation in list(self._open):
            cancellation.cancel()

    def _done(
        self,
        infer: pb.ModelInferRequest,
        request: InferRequest,
        result: InferResponse | ServeError | None,
        final: bool,
    ) -> None:
        if final:
            self._in_flight -= 1
            if request.cancellation is not None:
                self._open.discard(request.cancellation)
        answer = stream_answer(infer, request, result, final)
        if answer is not None:
            self._send(answer)
        if self._half_closed and self._in_flight == 0:
            self._call.finish(0)

    def _send(self, answer: pb.ModelStreamInferResponse) -> None:
        self._call.send_message(answer.SerializeToString())


def build_router(dataplane: DataPlaneApi, restricted: RestrictedApis | None = None) -> Router:
    """':path' -> method for every method of the service; a restricted one admits only calls
    carrying its key."""
    servicer = InferenceServicer(dataplane)
    routes: dict[bytes, RpcMethod] = {}
    for method in pb.DESCRIPTOR.services_by_name["GRPCInferenceService"].methods:
        path = f"/{SERVICE}/{method.name}".encode()
        restriction = restricted.for_grpc(method.name) if restricted else None
        admit = _admit(restriction) if restriction is not None else None
        if method.name == "ModelInfer":
            routes[path] = RpcMethod(unary=_Infer(dataplane), admit=admit)
        elif method.name in _STREAMING:
            routes[path] = RpcMethod(open_stream=lambda call: _Stream(dataplane, call), admit=admit)
        else:
            request_type = getattr(pb, method.input_type.name)
            routes[path] = RpcMethod(
                unary=_servicer_method(getattr(servicer, method.name), request_type),
                admit=admit,
            )
    return routes.get


def _admit(restriction: Restriction) -> Callable[[list[tuple[bytes, bytes]]], str | None]:
    key = restriction.key.encode("latin-1")

    def admit(headers: list[tuple[bytes, bytes]]) -> str | None:
        presented = next((value for name, value in headers if name == key), None)
        return None if restriction.allows(presented) else restriction.refusal

    return admit


class NativeGrpcEndpoint:
    """The gRPC endpoint on `serve.grpc.http2` (the default front end)."""

    name = "GRPCInferenceService"

    def __init__(
        self,
        dataplane: DataPlaneApi,
        address: str,
        port: int,
        limits: GrpcLimits,
        restricted: RestrictedApis | None = None,
        *,
        reuse_port: bool = False,
    ):
        self._address = address
        self._port = port
        self._reuse_port = reuse_port
        self._server = Http2GrpcServer(build_router(dataplane, restricted), limits)

    async def start(self) -> tuple[str, int]:
        sock = bind_tcp(self._address, self._port, reuse_port=self._reuse_port)
        try:
            await self._server.start(sock)
        except BaseException:
            sock.close()
            raise
        host, port = sock.getsockname()[:2]
        return host, port

    async def stop(self) -> None:
        await self._server.stop(STOP_GRACE_S)
