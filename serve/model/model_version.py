"""One loaded, servable model version: checks requests and hands them to its scheduler."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from serve.backends.base import RequestResult
from serve.errors import ServeError
from serve.inference import InferRequest, InferResponse
from serve.model.classification import Labels
from serve.model.response_cache import CachedModel, ResponseCache
from serve.model.served import ResponseCallback, StreamCallback
from serve.model.tensors import TensorChecker
from serve.scheduler.base import Scheduler
from serve.scheduler.instance_worker import InstanceWorker
from serve.scheduler.statistics import ModelStatistics


class ModelVersion:
    """A version run by a backend (a `ServedModel`): its instances' workers, the scheduler that
    batches for them, its statistics, and the response cache where it enables one."""

    def __init__(
        self,
        config: mc.ModelConfig,
        version: int,
        model_dir: Path,
        workers: list[InstanceWorker],
        batcher: Scheduler,
        stats: ModelStatistics,
        labels: Mapping[str, Labels] | None = None,
        cache: ResponseCache | None = None,
    ) -> None:
        self.config = config
        self.name = config.name
        self.version = version
        self.model_dir = model_dir
        self.workers = workers
        self.batcher = batcher
        self.stats = stats
        self.checker = TensorChecker(config, str(version), labels)
        self.decoupled = config.model_transaction_policy.decoupled
        # The server's response cache, where this model enables it.
        self.cache = None if cache is None else CachedModel(cache, self.name, str(version), stats)

    @property
    def pending_requests(self) -> int:
        """Requests waiting in the scheduler for an instance (Triton's pending-request gauge:
        counted from enqueue until an instance starts executing them)."""
        return self.batcher.queued

    def ready(self) -> bool:
        """Every instance says it can serve (a model's own readiness check, where it has one)."""
        return all(worker.instance.ready() for worker in self.workers)

    def submit(self, request: InferRequest, on_done: ResponseCallback) -> None:
        """Validate (raising ServeError) and queue; `on_done` gets the response or an error."""
        self.checker.check_request(request)
        respond = self.checker.responder(request, on_done)
        if self.cache is None:
            self.batcher.enqueue(request, respond)
            return
        wanted = self.checker.wanted_outputs(request)
        self.cache.submit(
            request, wanted, respond, lambda done: self.batcher.enqueue(request, done)
        )

    def submit_stream(self, request: InferRequest, on_response: StreamCallback) -> None:
        """Validate (raising ServeError) and queue a decoupled model's request: `on_response`
        gets each response on the event loop's thread, the last one with final True.

        The batch's execute may return before the request's final flag (the model goes on
        sending from its own threads): the request is counted when execute returns, and its
        stream ends with the final flag, or with the error the batch ended with."""
        self.checker.check_request(request)
        checker = self.checker
        loop = asyncio.get_running_loop()
        executed = False
        ended = False
        held: list[InferResponse | ServeError | None] = []  # a final flag before execute returned

        def deliver(result: InferResponse | ServeError | None, final: bool) -> None:  # loop
            nonlocal ended
            if ended:
                return
            if not final:
                on_response(result, False)
            elif executed:
                ended = True
                on_response(result, True)
            else:
                held.append(result)  # until the statistics have counted the request

        def respond(produced: RequestResult | None, final: bool) -> None:  # instance's thread
            result: InferResponse | ServeError | None
            if produced is None or isinstance(produced, ServeError):
                result = produced
            else:
                try:
                    result = checker.make_response(request, produced)
                except ServeError as exc:
                    result = exc
            loop.call_soon_threadsafe(deliver, result, final)

        def finish(result: RequestResult) -> None:
            # Runs after execute returned and the request was counted (its responses so far
            # were queued before, on the same loop). A request refused, timed out or failed
            # with its batch ends with that error.
            nonlocal executed, ended
            executed = True
            if ended:
                return
            if held:
                ended = True
                on_response(held[0], True)
            elif isinstance(result, ServeError):
                ended = True
                on_response(result, True)

        request.on_response = respond
        self.batcher.enqueue(request, finish)

    async def unload(self) -> None:
        await self.batcher.close()
