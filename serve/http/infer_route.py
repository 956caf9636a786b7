"""The infer route as a plain ASGI handler in front of the FastAPI control plane (the uvicorn
front end, `--http-front-end uvicorn`, and the in-process app of `serve.server.open_http_app`).

FastAPI's request machinery doubled the CPU per request on this path when measured (a route
through FastAPI cost ~140 us of server CPU per request, a plain ASGI handler ~75 us), so
POST .../infer is decoded and answered here directly (`serve.http.infer_call`); every other
request goes on to FastAPI.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from protocol.headers import HEADER_LENGTH_ASGI
from serve.dataplane import DataPlane
from serve.http.infer_call import INFER_PATH, InferAnswer, submit_infer

log = logging.getLogger("serve.http")

ASGIApp = Any


class InferRoute:
    def __init__(self, dataplane: DataPlane, control_plane: ASGIApp) -> None:
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
        body = await _read_body(receive)
        header_length = None
        for key, value in scope["headers"]:
            if key == HEADER_LENGTH_ASGI:
                header_length = value
                break
        future: asyncio.Future[InferAnswer] = asyncio.get_running_loop().create_future()
        submit_infer(
            self._dataplane, body, header_length, model, version, future.set_result, recv_start
        )
        answer = await future
        answer.sending()
        try:
            await _respond(send, answer)
        finally:
            answer.sent()


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


async def _respond(send: Any, answer: InferAnswer) -> None:
    body = answer.body
    headers = [(b"content-type", answer.content_type), (b"content-length", b"%d" % len(body))]
    if answer.json_length is not None:
        headers.append((HEADER_LENGTH_ASGI, b"%d" % answer.json_length))
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
