"""A loaded ensemble version: checks requests against the ensemble's config and runs them
through the ensemble scheduler; ready while every composing model is."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from serve.config.ensemble import check_ensemble_steps
from serve.errors import ServeError
from serve.inference import InferRequest
from serve.model.classification import Labels, read_labels
from serve.model.response_cache import CachedModel, ResponseCache
from serve.model.served import ResponseCallback, ServedModel, StreamCallback
from serve.model.tensors import TensorChecker
from serve.scheduler.ensemble import EnsembleScheduler
from serve.scheduler.statistics import ModelStatistics

# (model name, version: "" for the latest) -> the model serving it; raises ServeError.
Resolver = Callable[[str, str], ServedModel]


class EnsembleVersion:
    """An ensemble as the repository serves it (a `ServedModel`): runs no instances of its own, each
    request goes through its steps on the composing models' schedulers. Never decoupled."""

    decoupled = False

    def __init__(
        self,
        config: mc.ModelConfig,
        version: int,
        model_dir: Path,
        resolve: Resolver,
        labels: Mapping[str, Labels] | None = None,
        cache: ResponseCache | None = None,
    ) -> None:
        self.config = config
        self.name = config.name
        self.version = version
        self.model_dir = model_dir
        self.stats = ModelStatistics(config.name, str(version))
        self.checker = TensorChecker(config, str(version), labels)
        self.scheduler = EnsembleScheduler(config, resolve, self.stats)
        self._resolve = resolve
        # The server's response cache, where this ensemble enables it.
        self.cache = (
            None if cache is None else CachedModel(cache, self.name, str(version), self.stats)
        )

    @property
    def pending_requests(self) -> int:
        return 0  # an ensemble queues nothing itself; its steps wait in their models' queues

    def unready_reason(self) -> str:
        """Why the ensemble cannot serve now ("" when it can): a composing model that is not
        loaded or not ready."""
        for step in self.scheduler.steps:
            try:
                model = self._resolve(step.model_name, step.model_version)
            except ServeError as exc:
                return f"{step.label}: {exc.message}"
            if not model.ready():
                return f"{step.label}: model '{step.model_name}' is not ready"
        return ""

    def ready(self) -> bool:
        return not self.unready_reason()

    def submit(self, request: InferRequest, on_done: ResponseCallback) -> None:
        """Validate (raising ServeError) and run; `on_done` gets the response or an error."""
        self.checker.check_request(request)
        wanted = self.checker.wanted_outputs(request)
        respond = self.checker.responder(request, on_done)
        if self.cache is None:
            self.scheduler.enqueue(request, wanted, respond)
            return
        self.cache.submit(
            request, wanted, respond, lambda done: self.scheduler.enqueue(request, wanted, done)
        )

    def submit_stream(self, request: InferRequest, on_response: StreamCallback) -> None:
        self.submit(request, lambda result: on_response(result, True))

    async def unload(self) -> None:
        await self.scheduler.close()


async def load_ensemble_version(
    config: mc.ModelConfig,
    version: int,
    model_dir: Path,
    resolve: Resolver,
    cache: ResponseCache | None = None,
) -> EnsembleVersion:
    """Check every step against its composing model's config (they are loaded first), then
    build the ensemble; ServeError naming the step when a composing model is missing."""
    composing: list[mc.ModelConfig] = []
    for index, step in enumerate(config.ensemble_scheduling.step):
        step_version = "" if step.model_version < 0 else str(step.model_version)
        try:
            composing.append(resolve(step.model_name, step_version).config)
        except ServeError as exc:
            raise ServeError(
                exc.kind,
                f"ensemble_scheduling.step[{index}] (model '{step.model_name}'): composing"
                f" model is not available: {exc.message}",
            ) from None
    check_ensemble_steps(
        config, composing, lambda field, message: ServeError.invalid(f"{field}: {message}")
    )
    labels = await asyncio.to_thread(read_labels, config, model_dir)
    enabled = cache if config.response_cache.enable else None
    return EnsembleVersion(config, version, model_dir, resolve, labels, enabled)
