"""The infer route as a plain ASGI handler in front of the FastAPI control plane.

FastAPI's request machinery doubled the CPU per request on this path when measured (a route
through FastAPI cost ~140 us of server CPU per request, a plain ASGI handler ~75 us), so
POST .../infer is decoded and answered here directly; every other request goes on to FastAPI.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from typing import Any

from protocol.headers import CONTENT_TYPE_BINARY, CONTENT_TYPE_JSON, HEADER_LENGTH_ASGI
from serve.dataplane import DataPlane
from serve.errors import ServeError
from serve.http.codec import (
    decode_infer_request,
    encode_error,
    encode_infer_response,
    parse_header_length,
)
from serve.http.status import HTTP_STATUS
from serve.inference import InferRequest, InferResponse
from serve.trace.request_trace import RequestTrace

log = logging.getLogger("serve.http")

_INFER_PATH = re.compile(r"^/v2/models/([^/]+)(?:/versions/([^/]+))?/infer$")
_HEADER_LENGTH = HEADER_LENGTH_ASGI
_JSON = CONTENT_TYPE_JSON.encode()
_BINARY = CONTENT_TYPE_BINARY.encode()

ASGIApp = Any


class InferRoute:
    def __init__(self, dataplane: DataPlane, control_plane: ASGIApp) -> None:
        self._dataplane = dataplane
        self._control_plane = control_plane

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            match = _INFER_PATH.match(scope["path"])
            if match is not None:
                await self._infer(scope, receive, send, match.group(1), match.group(2) or "")
                return
        if scope["type"] == "http" and log.isEnabledFor(logging.DEBUG):
            log.debug("HTTP request: %s %s", scope["method"], scope["path"])
        await self._control_plane(scope, receive, send)

    async def _infer(
        self, scope: dict[str, Any], receive: Any, send: Any, model: str, version: str
    ) -> None:
        tracer = self._dataplane.tracer
        recv_start = time.monotonic_ns() if tracer.active else 0
        body = await _read_body(receive)
        recv_end = time.monotonic_ns() if recv_start else 0
        header_length = None
        for key, value in scope["headers"]:
            if key == _HEADER_LENGTH:
                header_length = value
                break
        trace: RequestTrace | None = None
        try:
            request = decode_infer_request(body, parse_header_length(header_length), model, version)
            future: asyncio.Future[InferResponse | ServeError] = (
                asyncio.get_running_loop().create_future()
            )
            self._dataplane.submit(request, future.set_result)
            if recv_start:
                trace = _join_trace(request, recv_start, recv_end)
            result = await future
            if isinstance(result, ServeError):
                raise result
            payload, json_length = encode_infer_response(result, request)
        except ServeError as exc:
            error = encode_error(exc.message)
            if trace is None:
                await _respond(send, HTTP_STATUS[exc.kind], error, _JSON, None)
            else:
                await _respond_traced(trace, send, HTTP_STATUS[exc.kind], error, _JSON, None)
            return
        content_type = _JSON if json_length is None else _BINARY
        if trace is None:
            await _respond(send, 200, payload, content_type, json_length)
        else:
            await _respond_traced(trace, send, 200, payload, content_type, json_length)


def _join_trace(request: InferRequest, recv_start: int, recv_end: int) -> RequestTrace | None:
    """When the core traces the request, add its reception and keep the trace open until
    the response is sent."""
    trace = request.trace
    if trace is None or not trace.hold():
        return None
    trace.stamp("HTTP_RECV_START", recv_start)
    trace.stamp("HTTP_RECV_END", recv_end)
    return trace


async def _respond_traced(
    trace: RequestTrace,
    send: Any,
    status: int,
    body: bytes,
    content_type: bytes,
    json_length: int | None,
) -> None:
    trace.stamp("HTTP_SEND_START")
    try:
        await _respond(send, status, body, content_type, json_length)
    finally:
        trace.stamp("HTTP_SEND_END")
        trace.release()


async def _read_body(receive: Any) -> bytes:
    message = await receive()
    body: bytes = message.get("body", b"")
    if not message.get("more_body", False):
        return body
    chunks = [body]
    while message.get("more_body", False):
        message = await receive()
        chunks.append(message.get("body", b""))
    return b"".join(chunks)


async def _respond(
    send: Any, status: int, body: bytes, content_type: bytes, json_length: int | None
) -> None:
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    if json_length is not None:
        headers.append((_HEADER_LENGTH, str(json_length).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
