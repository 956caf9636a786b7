"""The infer route as a plain ASGI handler in front of the control plane (the uvicorn front end,
`--http-front-end uvicorn`, and the in-process app of `serve.server.open_http_app`). A client
that disconnects before its answer cancels its request.

A web framework's request machinery doubled the CPU per request on this path when measured (a
FastAPI route cost ~140 us of server CPU per request, a plain ASGI handler ~75 us), so
POST .../infer is decoded and answered here directly (`serve.http.infer_call`); every other
request goes on to the control plane (`serve.http.app`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from protocol.headers import HEADER_LENGTH_ASGI
from serve.dataplane_api import DataPlaneApi
from serve.http.infer_call import INFER_PATH, InferAnswer, submit_infer
from serve.http.router import read_body
from serve.inference import Cancellation

log = logging.getLogger("serve.http")

ASGIApp = Any


class InferRoute:
    """The ASGI application of the uvicorn front end: POST .../infer answered here, every other
    request passed on to the control plane."""

    def __init__(self, dataplane: DataPlaneApi, control_plane: ASGIApp) -> None:
        self._dataplane = dataplane
        self._control_plane = control_plane

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            match = INFER_PATH.match(scope["path"])
            if match is not None:
                await self._infer(scope, receive, send, match.group(1), match.group(2) or "")
                return
        if scope["type"] == "http" and log.isEnabledFor(logging.DEBUG):
            log.debug("HTTP request: %s %s", scope["method"], scope["path"])
        await self._control_plane(scope, receive, send)

    async def _infer(
        self, scope: dict[str, Any], receive: Any, send: Any, model: str, version: str
    ) -> None:
        recv_start = time.monotonic_ns() if self._dataplane.tracer.active else 0
        body = await read_body(receive)
        header_length = None
        for key, value in scope["headers"]:
            if key == HEADER_LENGTH_ASGI:
                header_length = value
                break
        future: asyncio.Future[InferAnswer] = asyncio.get_running_loop().create_future()
        cancellation = Cancellation()
        submit_infer(
            self._dataplane,
            body,
            header_length,
            model,
            version,
            future.set_result,
            recv_start,
            cancellation,
        )
        if not future.done():
            await _watch_disconnect(receive, future, cancellation)
        answer = await future
        answer.sending()
        try:
            await _respond(send, answer)
        finally:
            answer.sent()


async def _watch_disconnect(
    receive: Any, answer: asyncio.Future[InferAnswer], cancellation: Cancellation
) -> None:
    """Until the answer is ready, wait for the client to go away (`http.disconnect`, which the
    server sends only then once the body is read): then cancel the request."""
    disconnect = asyncio.ensure_future(receive())
    try:
        await asyncio.wait((answer, disconnect), return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not disconnect.done():
            disconnect.cancel()
    if answer.done() or disconnect.cancelled() or disconnect.exception() is not None:
        return
    if disconnect.result().get("type") == "http.disconnect":
        cancellation.cancel()


async def _respond(send: Any, answer: InferAnswer) -> None:
    body = answer.body if isinstance(answer.body, bytes) else b"".join(answer.body)
    headers = [(b"content-type", answer.content_type), (b"content-length", b"%d" % len(body))]
    if answer.json_length is not None:
        headers.append((HEADER_LENGTH_ASGI, b"%d" % answer.json_length))
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
