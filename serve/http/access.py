"""Restricted APIs over HTTP: a request to a restricted group without its key header is
answered 403 with Triton's message. The native routes call `refusal`; under uvicorn,
`RestrictedAccess` wraps the application."""

from __future__ import annotations

from typing import Any

from serve.http.asgi_error import send_error
from serve.restricted import RestrictedApis


def refusal(restricted: RestrictedApis, path: str, header: Any) -> str | None:
    """Why the request may not go on, or None; `header(name: bytes)` gives a header's value."""
    restriction = restricted.for_http(path)
    if restriction is None or restriction.allows(header(restriction.key.encode("latin-1"))):
        return None
    return restriction.refusal


class RestrictedAccess:
    """ASGI middleware applying `RestrictedApis` (nothing to do when none is restricted)."""

    def __init__(self, app: Any, restricted: RestrictedApis) -> None:
        self._app = app
        self._restricted = restricted

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and self._restricted:
            headers = scope["headers"]

            def header(name: bytes) -> bytes | None:
                return next((v for k, v in headers if k == name), None)

            message = refusal(self._restricted, scope["path"], header)
            if message is not None:
                await send_error(send, 403, message)
                return
        await self._app(scope, receive, send)
