"""What a model version asks of its scheduler (dynamic batcher, sequence batcher, ...)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from serve.backends.base import RequestResult
from serve.inference import InferRequest

Completion = Callable[[RequestResult], None]


class Scheduler(Protocol):
    """Runs on the event loop's thread; knows neither the transport nor the backend."""

    @property
    def queued(self) -> int:
        """Requests waiting for an instance (the pending-request gauge)."""
        ...

    def enqueue(self, request: InferRequest, on_done: Completion) -> None:
        """Accept a validated request; `on_done` gets its result or a ServeError, exactly once."""
        ...

    async def close(self) -> None:
        """Stop accepting, let queued and running requests finish, then unload the instances."""
        ...
