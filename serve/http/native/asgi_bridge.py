"""An ASGI application (the control plane of `serve.http.app`) behind the native front end.

Each request runs the application in its own task (the control plane is not the hot path);
the whole answer is gathered and handed to the request's slot, so it leaves in order, framed
by the connection (Content-Length, Connection), in one write. An application that sends its
body in pieces (`more_body`, e.g. server-sent events) is streamed instead: each piece goes out
as it comes, in chunked transfer coding.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from serve.http.codec import encode_error
from serve.http.native.protocol import HttpRequest, ResponseSlot

log = logging.getLogger("serve.http")

ASGIApp = Any
_JSON_HEADER = b"content-type: application/json\r\n"
# Framing is the connection's: the answer is sent whole, with its own Content-Length.
_FRAMING = {b"content-length", b"transfer-encoding", b"connection"}


class AsgiBridge:
    """Runs the control plane's ASGI application for requests of the native front end, each in a
    task of its own, its answer handed to the request's slot; `wait` lets them finish at
    shutdown."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app
        self._tasks: set[asyncio.Task[None]] = set()

    def run(
        self, request: HttpRequest, path: str, raw_path: bytes, query: bytes, slot: ResponseSlot
    ) -> None:
        client, server = slot.addresses()
        version = request.http_version
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": version if version in ("1.0", "1.1") else "1.1",
            "server": server,
            "client": client,
            "scheme": "http",
            "method": request.method.decode("ascii"),
            "root_path": "",
            "path": path,
            "raw_path": raw_path,
            "query_string": query,
            "headers": request.headers,
        }
        body = request.body if type(request.body) is bytes else bytes(request.body)
        task = asyncio.get_running_loop().create_task(self._call(scope, body, slot))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def wait(self, grace_s: float) -> None:
        """Let the requests still running finish (up to `grace_s`), then cancel them."""
        if not self._tasks:
            return
        _, running = await asyncio.wait(set(self._tasks), timeout=grace_s)
        for task in running:
            task.cancel()

    async def _call(self, scope: dict[str, Any], body: bytes, slot: ResponseSlot) -> None:
        answer = _Answer(scope["method"] == "HEAD", slot)
        body_read = False

        async def receive() -> dict[str, Any]:
            nonlocal body_read
            if not body_read:
                body_read = True
                return {"type": "http.request", "body": body, "more_body": False}
            await slot.disconnected()
            return {"type": "http.disconnect"}

        try:
            await self._app(scope, receive, answer.send)
        except Exception as exc:
            log.exception("HTTP control-plane request failed")
            if answer.streaming:
                slot.end_stream()
                return
            if not answer.complete:
                slot.send(500, _JSON_HEADER, encode_error(f"internal error: {exc!r}"))
                return
        if answer.streaming:
            slot.end_stream()
            return
        if not answer.complete:
            slot.send(500, _JSON_HEADER, encode_error("the application sent no complete response"))
            return
        slot.send(
            answer.status, b"".join(answer.headers), b"".join(answer.body), None, answer.length
        )


class _Answer:
    """The ASGI `send` side: the response's messages gathered."""

    def __init__(self, head_only: bool, slot: ResponseSlot) -> None:
        self.head_only = head_only
        self.slot = slot
        self.streaming = False  # the body comes in pieces: each is pushed to the slot
        self.status = 500
        self.headers: list[bytes] = []
        self.body: list[bytes] = []
        self.length = -1  # a HEAD answer's Content-Length, as the application gave it
        self.started = False
        self.complete = False

    async def send(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind == "http.response.start" and not self.started:
            self.started = True
            self.status = int(message["status"])
            for name, value in message.get("headers", ()):
                name = bytes(name).lower()
                if name in _FRAMING:
                    if name == b"content-length" and self.head_only:
                        self.length = int(value)
                    continue
                self.headers.append(b"%s: %s\r\n" % (name, bytes(value)))
        elif kind == "http.response.body" and self.started and not self.complete:
            chunk = message.get("body", b"")
            more = message.get("more_body", False)
            if more and not self.streaming and not self.head_only:
                self.streaming = True
                self.slot.open_stream(self.status, b"".join(self.headers))
                for earlier in self.body:
                    self.slot.push(earlier)
                self.body.clear()
            if self.streaming:
                if chunk:
                    self.slot.push(bytes(chunk))
                if not more:
                    self.complete = True
                    self.slot.end_stream()
                return
            if chunk:
                self.body.append(bytes(chunk))
            if not more:
                self.complete = True
                if self.body:  # a body given for HEAD sets its length
                    self.length = -1
