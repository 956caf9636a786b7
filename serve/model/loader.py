"""Loading one model version: instances per instance_group, warmup, scheduler."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from serve.backends.base import Backend, InstanceContext, ModelCalls, ModelInstance
from serve.backends.registry import backend_name, get_backend
from serve.custom_metrics import CustomMetrics
from serve.errors import ServeError
from serve.model.classification import read_labels
from serve.model.model_version import ModelVersion
from serve.model.response_cache import ResponseCache
from serve.model.warmup import run_warmup
from serve.platform import ServingPlatform, detect_platform
from serve.scheduler.base import Scheduler
from serve.scheduler.dynamic_batcher import DynamicBatcher
from serve.scheduler.instance_worker import InstanceWorker
from serve.scheduler.queue_policy import BatchingPolicy
from serve.scheduler.rate_limiter import InstanceNeeds, RateLimiter
from serve.scheduler.sequence_batcher import SequenceBatcher
from serve.scheduler.sequence_inputs import SequenceInputs
from serve.scheduler.statistics import ModelStatistics

log = logging.getLogger("serve.loader")


@dataclass(frozen=True, slots=True)
class PlannedInstance:
    """One instance to create: its name (Triton's `<group>_<index>`), the kind it really runs on
    (KIND_AUTO resolved) and its GPU."""

    name: str
    kind: str
    device_id: int
    group: mc.ModelInstanceGroup = field(default_factory=mc.ModelInstanceGroup)


def plan_instances(
    config: mc.ModelConfig,
    backend: Backend,
    platform: Callable[[], ServingPlatform] = detect_platform,
) -> list[PlannedInstance]:
    """The instances the config asks for, as Triton places them: a KIND_GPU group puts
    `count` instances on each GPU it lists (every visible GPU when it lists none); KIND_AUTO
    is KIND_GPU where the backend can use a GPU here, else KIND_CPU. A KIND_GPU group that
    cannot have its GPUs fails the load, naming the group: it is never run on the CPU instead.
    `platform` is asked only when a group is not KIND_CPU."""
    groups = list(config.instance_group) or [mc.ModelInstanceGroup()]
    planned: list[PlannedInstance] = []
    for index, group in enumerate(groups):
        group_name = group.name or (config.name if len(groups) == 1 else f"{config.name}_{index}")
        kind = mc.ModelInstanceGroup.Kind.Name(group.kind)
        devices: list[int] = [0]
        if kind in ("KIND_GPU", "KIND_AUTO"):
            here = platform()
            where = f"{config.name}: instance_group[{index}]"
            if kind == "KIND_GPU":  # a GPU the machine lacks, whatever the backend
                devices = _group_devices(group, here.gpu_ids, where)
            reason = backend.gpu_unavailable_reason(here)
            if reason is not None and kind == "KIND_GPU":
                raise ServeError.unavailable(f"{where} is KIND_GPU but {reason}")
            kind = "KIND_CPU" if reason is not None else "KIND_GPU"
            if kind == "KIND_GPU":
                devices = _group_devices(group, here.gpu_ids, where)
        count = group.count or backend.default_instance_count(kind)
        placed = [device for device in devices for _ in range(count)]
        planned += [
            PlannedInstance(f"{group_name}_{i}", kind, device, group)
            for i, device in enumerate(placed)
        ]
    return planned


def _group_devices(group: mc.ModelInstanceGroup, visible: Sequence[int], where: str) -> list[int]:
    listed = list(group.gpus)
    missing = [gpu for gpu in listed if gpu not in visible]
    if missing:
        raise ServeError.invalid(
            f"{where}.gpus lists {missing}, which this machine does not have "
            f"(GPUs visible: {list(visible) or 'none'})"
        )
    return listed or list(visible)


def model_file(config: mc.ModelConfig, model_dir: Path, version: int, backend: Backend) -> Path:
    """Where version `version`'s model file is: the config's `default_model_filename`, else the
    backend's, in the version's folder. Not checked to exist."""
    filename = config.default_model_filename or backend.default_model_filename
    return model_dir / str(version) / filename


@dataclass(frozen=True, slots=True)
class ServerServices:
    """What the server offers the models it runs (BLS and model control, custom metrics)."""

    model_calls: ModelCalls | None = None
    custom_metrics: CustomMetrics | None = None
    response_cache: ResponseCache | None = None  # --cache-config; used where a model enables it
    rate_limiter: RateLimiter | None = None  # --rate-limit; instances hold their resources


async def load_model_version(
    config: mc.ModelConfig,
    version: int,
    model_dir: Path,
    repository_path: Path,
    services: ServerServices | None = None,
) -> ModelVersion:
    """Create, load and warm up every instance, then start the scheduler."""
    loop = asyncio.get_running_loop()
    services = services or ServerServices()
    if services.model_calls is not None:
        services.model_calls.bind(loop)
    backend = get_backend(backend_name(config))
    path = model_file(config, model_dir, version, backend)
    if not path.exists():
        raise ServeError.unavailable(f"model file {path} does not exist")
    labels = await asyncio.to_thread(read_labels, config, model_dir)
    sequence_inputs = None
    if config.HasField("sequence_batching"):
        sequence_inputs = await asyncio.to_thread(SequenceInputs, config, model_dir)
    instances: list[ModelInstance] = []
    workers: list[InstanceWorker] = []
    try:
        for planned in plan_instances(config, backend):
            context = InstanceContext(
                model_name=config.name,
                model_version=version,
                repository_path=repository_path,
                model_dir=model_dir,
                model_path=path,
                config=config,
                instance_name=planned.name,
                instance_index=len(instances),
                kind=planned.kind,
                device_id=planned.device_id,
                model_calls=services.model_calls,
                custom_metrics=services.custom_metrics,
            )
            instance = backend.create_instance(context)
            instances.append(instance)
            await asyncio.to_thread(instance.load)
            worker = InstanceWorker(instance, loop)
            limiter = services.rate_limiter
            if limiter is not None and limiter.enabled:
                needs = InstanceNeeds.of(planned.group, planned.device_id)
                limiter.admit(needs)
                worker.limits = (limiter, needs)
            workers.append(worker)
        if config.model_warmup:
            await asyncio.to_thread(run_warmup, config, model_dir, workers)
    except BaseException:
        for worker in workers:
            await asyncio.to_thread(worker.close)
        for instance in instances[len(workers) :]:
            await asyncio.to_thread(instance.unload)
        raise
    stats = ModelStatistics(config.name, str(version))
    batcher: Scheduler
    if sequence_inputs is not None:
        batcher = SequenceBatcher(config, sequence_inputs, workers, stats, loop)
    else:
        batcher = DynamicBatcher(BatchingPolicy.from_config(config), workers, stats, loop)
    cache = services.response_cache if config.response_cache.enable else None
    return ModelVersion(config, version, model_dir, workers, batcher, stats, labels, cache)
