"""What the server a run tunes can run models on: the platform its search space is built for.

- autotune (private): this machine as our server sees it (`Platform.detect`, the server's own
  rule for which backends run on a GPU here).
- tritonserver (private, on this machine): this machine's cores and GPUs (NVML); with a GPU,
  Triton's own backends place instances there (`TRITON_GPU_BACKENDS`), whatever this Python
  has installed; TensorRT precisions as this machine can build them (variants are built here).
- remote: the GPUs it reports on its metrics endpoint (`--server-metrics-url`; none without
  it); this machine's core count stands in for its own (a server does not report one); no
  TensorRT or CPU bf16 precisions (they would be built here, for hardware not seen).

Where the space would hold GPU instances on another server than ours, one test load with a
KIND_GPU instance group confirms it first (`confirm_gpu`): a refused load leaves GPU instances
out of the space, with the server's reason, instead of every GPU trial being refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from tritonclient.grpc import model_config_pb2 as mc

from analyzer.api import server_gpus
from tuner.server_control import ServerError, TuningServer
from tuner.server_target import AUTOTUNE, TRITONSERVER, ServerChoice
from tuner.space import Platform

TRITON_GPU_BACKENDS = frozenset({"onnxruntime", "pytorch", "tensorrt", "python"})


@dataclass(frozen=True, slots=True)
class TargetPlatform:
    """The platform a space is built for on the server tuned, and what the run could not
    learn of that server (notes, told once)."""

    platform: Platform
    notes: tuple[str, ...] = ()  # what the run could not learn of the target, said once


def target_platform(
    choice: ServerChoice,
    here: Platform | None = None,
    read_gpus: Callable[[str], dict[str, int]] = server_gpus,
) -> TargetPlatform:
    """The platform `choice`'s server offers (see the module docstring); `here` is this
    machine (detected when None), `read_gpus` reads a metrics endpoint's GPUs."""
    local = here if here is not None else Platform.detect()
    if choice.kind == AUTOTUNE:
        return TargetPlatform(local)
    if choice.kind == TRITONSERVER:
        backends = TRITON_GPU_BACKENDS if local.gpu_names else frozenset()
        return TargetPlatform(replace(local, gpu_backends=backends))
    notes = [
        f"the server at {choice.url} does not report its cores: instance counts are "
        f"searched up to this machine's {local.cpu_count}"
    ]
    gpus: dict[str, int] = {}
    if not choice.metrics_url:
        notes.append("no --server-metrics-url: the server's GPUs are unknown, CPU instances only")
    else:
        try:
            gpus = read_gpus(choice.metrics_url)
        except (OSError, ValueError) as exc:
            notes.append(
                f"the server's GPUs could not be read from {choice.metrics_url} ({exc}): "
                "CPU instances only"
            )
    names = tuple(f"GPU {uuid} ({total / 2**30:.1f} GiB)" for uuid, total in gpus.items())
    platform = Platform(
        cpu_count=local.cpu_count,
        gpu_backends=TRITON_GPU_BACKENDS if gpus else frozenset(),
        gpu_names=names,
    )
    return TargetPlatform(platform, tuple(notes))


def confirm_gpu(
    server: TuningServer, model: str, base: mc.ModelConfig, backend: str, platform: Platform
) -> tuple[Platform, str | None]:
    """On a server other than ours: load `base` once with one KIND_GPU instance; when the
    server refuses, the platform without GPU instances for `backend` and why (None when
    they load, or on our own server, whose rule the platform already is)."""
    if server.choice.kind == AUTOTUNE or not platform.gpu_for(backend):
        return platform, None
    probe = mc.ModelConfig()
    probe.CopyFrom(base)
    del probe.instance_group[:]
    probe.instance_group.add(kind=mc.ModelInstanceGroup.KIND_GPU, count=1)
    try:
        server.load(probe, model)
    except ServerError as exc:
        without = replace(platform, gpu_backends=platform.gpu_backends - {backend})
        return without, f"{model}: no GPU instances: the server refused a KIND_GPU load ({exc})"
    return platform, None
