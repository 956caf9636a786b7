"""Where the API's server-bound calls go: the stub installs its services here at start (BLS
inference, model control, custom metrics, request state); outside a stub those calls raise
TritonModelException."""

from __future__ import annotations

from typing import Any, Protocol

from serve.backends.python.pb_errors import TritonModelException


class StubServices(Protocol):
    """What the stub provides to the API for the calls that need the server."""

    def infer(self, request: Any, decoupled: bool) -> Any:
        """Run a BLS request (a pb_utils.InferenceRequest): one InferenceResponse, or an
        iterator of them when `decoupled`."""

    async def infer_async(self, request: Any, decoupled: bool) -> Any: ...

    def control(self, op: str, args: tuple[Any, ...]) -> Any: ...

    def metric(self, op: str, args: tuple[Any, ...]) -> float | None: ...


_SERVICES: StubServices | None = None


def install_services(services: StubServices | None) -> None:
    """Called by the stub once at start (None removes them)."""
    global _SERVICES
    _SERVICES = services


def services() -> StubServices:
    """The services the stub installed; TritonModelException outside a stub (no server to call)."""
    if _SERVICES is None:
        raise TritonModelException(
            "this call needs the server: it only works inside a model the server runs"
        )
    return _SERVICES
