"""One loaded, servable model version: checks requests and hands them to its scheduler."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from serve.backends.base import RequestResult
from serve.errors import ServeError
from serve.inference import InferRequest, InferResponse
from serve.model.classification import Labels
from serve.model.tensors import TensorChecker
from serve.scheduler.dynamic_batcher import DynamicBatcher
from serve.scheduler.instance_worker import InstanceWorker
from serve.scheduler.statistics import ModelStatistics

ResponseCallback = Callable[[InferResponse | ServeError], None]


class ModelVersion:
    def __init__(
        self,
        config: mc.ModelConfig,
        version: int,
        model_dir: Path,
        workers: list[InstanceWorker],
        batcher: DynamicBatcher,
        stats: ModelStatistics,
        labels: Mapping[str, Labels] | None = None,
    ) -> None:
        self.config = config
        self.name = config.name
        self.version = version
        self.model_dir = model_dir
        self.workers = workers
        self.batcher = batcher
        self.stats = stats
        self.checker = TensorChecker(config, str(version), labels)

    @property
    def pending_requests(self) -> int:
        """Requests waiting in the scheduler for an instance (Triton's pending-request gauge:
        counted from enqueue until an instance starts executing them)."""
        return self.batcher.queued

    def submit(self, request: InferRequest, on_done: ResponseCallback) -> None:
        """Validate (raising ServeError) and queue; `on_done` gets the response or an error."""
        self.checker.check_request(request)
        checker = self.checker

        def finish(result: RequestResult) -> None:
            if isinstance(result, ServeError):
                on_done(result)
                return
            try:
                response = checker.make_response(request, result)
            except ServeError as exc:
                on_done(exc)
                return
            on_done(response)

        self.batcher.enqueue(request, finish)

    async def unload(self) -> None:
        await self.batcher.close()
