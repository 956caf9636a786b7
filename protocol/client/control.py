"""The control calls both clients make (`HttpClient`, `GrpcClient`), and picking one by
protocol name (perf_analyzer's -i)."""

from __future__ import annotations

from typing import Any, Protocol

from protocol.client.grpc import GrpcClient
from protocol.client.http import Endpoint, HttpClient
from protocol.errors import ClientError

PROTOCOLS = ("http", "grpc")


class ControlClient(Protocol):
    """Server and model metadata, config, statistics, the repository and shared-memory
    extensions; every call raises ClientError when it fails."""

    @property
    def endpoint(self) -> Endpoint: ...

    async def server_metadata(self) -> dict[str, Any]: ...
    async def model_metadata(self, model: str, version: str = "") -> dict[str, Any]: ...
    async def model_config(self, model: str, version: str = "") -> dict[str, Any]: ...
    async def statistics(self, model: str = "", version: str = "") -> dict[str, Any]: ...
    async def repository_index(self) -> list[dict[str, Any]]: ...
    async def load_model(self, model: str, parameters: dict[str, Any] | None = None) -> None: ...
    async def unload_model(self, model: str) -> None: ...
    async def register_system_shared_memory(
        self, name: str, key: str, byte_size: int, offset: int = 0
    ) -> None: ...
    async def unregister_system_shared_memory(self, name: str = "") -> None: ...
    async def system_shared_memory_status(self, name: str = "") -> list[dict[str, Any]]: ...
    async def register_cuda_shared_memory(
        self, name: str, raw_handle: bytes, device_id: int, byte_size: int
    ) -> None: ...
    async def unregister_cuda_shared_memory(self, name: str = "") -> None: ...
    async def close(self) -> None: ...


def open_client(
    protocol: str, url: str, headers: dict[str, str] | None = None, timeout_s: float = 30.0
) -> ControlClient:
    """A client of the server at `url` over `protocol` ("http" or "grpc"); ClientError for
    another protocol or an address that cannot be parsed. Nothing connects until a call."""
    if protocol == "http":
        return HttpClient(url, headers, timeout_s)
    if protocol == "grpc":
        return GrpcClient(url, headers, timeout_s)
    raise ClientError(f"the protocol must be one of {', '.join(PROTOCOLS)}, got '{protocol}'")
