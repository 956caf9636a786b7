"""The control calls of `HttpClient` and `GrpcClient` for synchronous code.

Each call opens a connection on an event loop of its own, makes the call and closes: fit for
occasional calls (loading a model, reading a config), not for a loop of them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from protocol.client.control import ControlClient, open_client
from protocol.client.grpc import parse_grpc_url
from protocol.client.http import parse_url

T = TypeVar("T")


class BlockingClient:
    """The control clients' calls, blocking; the same errors (ClientError)."""

    def __init__(
        self,
        url: str,
        headers: dict[str, str] | None = None,
        timeout_s: float = 30.0,
        protocol: str = "http",
    ) -> None:
        self.endpoint = parse_grpc_url(url) if protocol == "grpc" else parse_url(url)
        self._protocol = protocol
        self._url = url
        self._headers = dict(headers or {})
        self._timeout_s = timeout_s

    def server_metadata(self) -> dict[str, Any]:
        return self._run(lambda client: client.server_metadata())

    def model_metadata(self, model: str, version: str = "") -> dict[str, Any]:
        return self._run(lambda client: client.model_metadata(model, version))

    def model_config(self, model: str, version: str = "") -> dict[str, Any]:
        return self._run(lambda client: client.model_config(model, version))

    def statistics(self, model: str = "", version: str = "") -> dict[str, Any]:
        return self._run(lambda client: client.statistics(model, version))

    def repository_index(self) -> list[dict[str, Any]]:
        return self._run(lambda client: client.repository_index())

    def load_model(self, model: str, parameters: dict[str, Any] | None = None) -> None:
        self._run(lambda client: client.load_model(model, parameters))

    def unload_model(self, model: str) -> None:
        self._run(lambda client: client.unload_model(model))

    def _run(self, call: Callable[[ControlClient], Awaitable[T]]) -> T:
        async def main() -> T:
            client = open_client(self._protocol, self._url, self._headers, self._timeout_s)
            try:
                return await call(client)
            finally:
                await client.close()

        return asyncio.run(main())
