"""What the repository serves: a model version of any kind (backend-run or ensemble)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from tritonclient.grpc import model_config_pb2 as mc

from serve.errors import ServeError
from serve.inference import InferRequest, InferResponse
from serve.scheduler.statistics import ModelStatistics

ResponseCallback = Callable[[InferResponse | ServeError], None]
# A decoupled model's responses: each response (None: a final flag with no response) and
# whether it is the request's last.
StreamCallback = Callable[[InferResponse | ServeError | None, bool], None]


class ServedModel(Protocol):
    """What the repository and the DataPlane need of a loaded version, whichever kind it is: its
    config, statistics, readiness, request submission and unloading."""

    config: mc.ModelConfig
    name: str
    version: int
    stats: ModelStatistics
    decoupled: bool

    @property
    def pending_requests(self) -> int: ...

    def ready(self) -> bool: ...

    def submit(self, request: InferRequest, on_done: ResponseCallback) -> None: ...

    def submit_stream(self, request: InferRequest, on_response: StreamCallback) -> None: ...

    async def unload(self) -> None: ...
