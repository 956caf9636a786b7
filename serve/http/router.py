"""A small ASGI router for the control plane: routes are path templates ("/v2/models/{model}")
with the methods they answer; a handler gets the path's parameters and the whole body and
returns an `Answer`.

It replaces a web framework here because the control plane needs nothing more, and importing
one cost ~0.25 s of CPU at every start. Matching follows the framework it replaces: the
decoded path must match a template whole, each parameter is one path segment, the first route
that matches path and method wins, HEAD is answered as GET, a path known under other methods
is 405 with Allow, an unknown one 404. A `ServeError` becomes its status and the error body once,
here; any other exception is logged and answered 500, and the server keeps serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from serve.errors import ServeError
from serve.http.codec import encode_error
from serve.http.status import HTTP_STATUS

log = logging.getLogger("serve.http")

_JSON = b"application/json"


@dataclass(frozen=True, slots=True)
class Answer:
    """What a control-plane handler returns: a status, a body (or a stream of pieces), its content
    type and any further headers."""

    status: int = 200
    body: bytes = b""
    content_type: bytes | None = None
    headers: tuple[tuple[bytes, bytes], ...] = ()
    # An answer sent in pieces as they come (server-sent events): `body` is ignored.
    stream: AsyncIterator[bytes] | None = None


@dataclass(frozen=True, slots=True)
class ControlRequest:
    """What a control-plane handler gets: the method, the path's parameters by name and the whole
    body."""

    method: str
    params: dict[str, str]
    body: bytes


Handler = Callable[[ControlRequest], Awaitable[Answer]]


def error_answer(status: int, message: str) -> Answer:
    """An error as the control plane answers it: `status` and the JSON error body."""
    return Answer(status, encode_error(message), _JSON)


@dataclass(slots=True)
class _Route:
    pattern: re.Pattern[str]
    handlers: dict[str, Handler] = field(default_factory=dict)


_PARAMETER = re.compile(r"\{(\w+)\}")


def compile_template(template: str) -> re.Pattern[str]:
    """ "/v2/models/{model}" -> a pattern matching the whole path, one segment per parameter."""
    parts = _PARAMETER.split(template)
    # split alternates literal text and parameter names
    regex = "".join(
        f"(?P<{part}>[^/]+)" if index % 2 else re.escape(part) for index, part in enumerate(parts)
    )
    return re.compile(regex + r"\Z")


class Router:
    """The control plane as an ASGI application."""

    def __init__(self) -> None:
        self._routes: list[_Route] = []
        self._by_template: dict[str, _Route] = {}

    def add(self, methods: str, template: str, handler: Handler) -> None:
        """`methods`: "GET", or "GET POST"."""
        route = self._by_template.get(template)
        if route is None:
            route = self._by_template[template] = _Route(compile_template(template))
            self._routes.append(route)
        for method in methods.split():
            route.handlers[method] = handler

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":  # lifespan and websockets: nothing to do
            return
        method = "GET" if scope["method"] == "HEAD" else scope["method"]
        answer = await self._answer(method, scope["path"], receive)
        headers = list(answer.headers)
        if answer.stream is None:
            headers.append((b"content-length", b"%d" % len(answer.body)))
        if answer.content_type is not None:
            headers.append((b"content-type", answer.content_type))
        await send({"type": "http.response.start", "status": answer.status, "headers": headers})
        if answer.stream is None:
            await send({"type": "http.response.body", "body": answer.body})
            return
        try:
            await _send_pieces(answer.stream, receive, send)
        finally:
            await send({"type": "http.response.body", "body": b""})

    async def _answer(self, method: str, path: str, receive: Any) -> Answer:
        allowed: set[str] = set()
        for route in self._routes:
            match = route.pattern.match(path)
            if match is None:
                continue
            handler = route.handlers.get(method)
            if handler is None:
                allowed.update(route.handlers)
                continue
            request = ControlRequest(method, match.groupdict(), await read_body(receive))
            try:
                return await handler(request)
            except ServeError as exc:
                return error_answer(HTTP_STATUS[exc.kind], exc.message)
            except Exception as exc:
                log.exception("HTTP control-plane request %s %s failed", method, path)
                return error_answer(500, f"internal error: {exc!r}")
        if allowed:
            allow = ", ".join(sorted(allowed | ({"HEAD"} if "GET" in allowed else set())))
            answer = error_answer(405, "Method Not Allowed")
            return Answer(answer.status, answer.body, _JSON, ((b"allow", allow.encode()),))
        return error_answer(404, "Not Found")


async def _send_pieces(stream: AsyncIterator[bytes], receive: Any, send: Any) -> None:
    """Send each piece of `stream` as it comes, until it ends or the client goes away (the
    next ASGI message after the body is the disconnect): then the stream is closed, which is
    how its producer learns that nobody listens any more."""
    gone = asyncio.ensure_future(receive())
    pieces = stream.__aiter__()
    try:
        while True:
            piece = asyncio.ensure_future(pieces.__anext__())
            await asyncio.wait({piece, gone}, return_when=asyncio.FIRST_COMPLETED)
            if not piece.done():
                piece.cancel()
                with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                    await piece
                return
            try:
                data = piece.result()
            except StopAsyncIteration:
                return
            await send({"type": "http.response.body", "body": data, "more_body": True})
    finally:
        gone.cancel()
        aclose = getattr(pieces, "aclose", None)
        if aclose is not None:
            await aclose()


async def read_body(receive: Any) -> bytes:
    """The whole body of an ASGI request (what arrived before a disconnect)."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":  # the client went away
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)
