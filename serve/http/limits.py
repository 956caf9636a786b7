"""What one HTTP client may hold of the server: request size, time to send a request, and
connections; and the answers given when a client goes past them.

The native front end applies every limit as it parses (a body over the size limit is refused
from its Content-Length, before it is read); under uvicorn, `BodyLimit` refuses oversized
bodies and uvicorn's own concurrency limit caps connections.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from serve.http.asgi_error import send_error

# tritonserver's --http-max-input-size default: 64 MiB.
DEFAULT_MAX_INPUT_BYTES = 64 * 2**20
# A request's line and headers together; more is refused with 431.
MAX_HEADER_BYTES = 64 * 2**10
DEFAULT_READ_TIMEOUT_S = 60.0
DEFAULT_MAX_CONNECTIONS = 4096
# Request bodies held at once across connections while they arrive: 16 of the largest.
DEFAULT_MAX_BUFFERED_BYTES = 16 * DEFAULT_MAX_INPUT_BYTES


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """The limits above, with the message each refusal carries (naming the limit and its flag where
    it has one)."""

    max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES  # a request body; more: 413
    # a request not received whole this long after its first byte: 408
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S
    max_connections: int = DEFAULT_MAX_CONNECTIONS  # open at once; more are answered 503
    max_header_bytes: int = MAX_HEADER_BYTES
    # request bodies held at once across the connections while they arrive (native front end);
    # one more waits, its connection not read, until there is room
    max_buffered_bytes: int = DEFAULT_MAX_BUFFERED_BYTES

    def too_large(self, size: int) -> str:
        return (
            f"request body of {size} bytes or more exceeds the server's limit of "
            f"{self.max_input_bytes} bytes (--http-max-input-size)"
        )

    def headers_too_large(self) -> str:
        return f"request line and headers exceed {self.max_header_bytes} bytes"

    def read_timed_out(self) -> str:
        return (
            f"request not received whole within {self.read_timeout_s:g} s of its first byte "
            "(--http-read-timeout)"
        )

    def too_many_connections(self) -> str:
        return (
            f"the server holds its limit of {self.max_connections} open HTTP connections "
            "(--http-max-connections): try again later"
        )


DEFAULT_LIMITS = HttpLimits()


class BodyLimit:
    """ASGI middleware: a request whose body is over `limits.max_input_bytes` is answered 413,
    from its Content-Length when it has one, else once the body read so far goes over; the
    application sees a body cut there as a disconnect."""

    def __init__(self, app: Any, limits: HttpLimits) -> None:
        self._app = app
        self._limit = limits.max_input_bytes
        self._limits = limits

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        for name, value in scope["headers"]:
            if name == b"content-length":
                if value.isdigit() and int(value) > self._limit:
                    await send_error(send, 413, self._limits.too_large(int(value)), close=True)
                    return
                break
        received = 0
        refused = False
        started = False

        async def limited_receive() -> dict[str, Any]:
            nonlocal received, refused
            message: dict[str, Any] = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self._limit:
                    refused = True
                    if not started:
                        await send_error(send, 413, self._limits.too_large(received), close=True)
                    return {"type": "http.disconnect"}
            return message

        async def tracked_send(message: dict[str, Any]) -> None:
            nonlocal started
            if refused:
                return  # the 413 is the answer
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        await self._app(scope, limited_receive, tracked_send)
