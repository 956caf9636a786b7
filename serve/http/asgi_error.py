"""An error answered straight from ASGI middleware (before the application sees the request):
the status and `{"error": message}`, as every error of the HTTP API."""

from __future__ import annotations

from typing import Any

from serve.http.codec import encode_error


async def send_error(send: Any, status: int, message: str, *, close: bool = False) -> None:
    """Answer `status` with the error body from ASGI middleware; `close` adds `Connection: close`
    (for a request whose body is left unread)."""
    body = encode_error(message)
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
