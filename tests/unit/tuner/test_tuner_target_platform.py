"""The platform a run's space is built for comes from the server it tunes: ours decides by its
own rule, a private tritonserver by this machine's GPUs and Triton's backends, a remote one by
the GPUs on its metrics endpoint; a GPU instance the server refuses to load leaves the space."""

from __future__ import annotations

from pathlib import Path

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from tuner.run import server_fingerprint
from tuner.server_control import ServerError
from tuner.server_target import ServerChoice
from tuner.space import Platform
from tuner.target_platform import TRITON_GPU_BACKENDS, confirm_gpu, target_platform

CPU_ONLY = Platform(cpu_count=2)
WITH_GPU = Platform(
    cpu_count=16, gpu_backends=frozenset({"pytorch"}), gpu_names=("GPU 0: NVIDIA H200",)
)


def _remote(metrics_url: str = "") -> ServerChoice:
    return ServerChoice.from_flags(None, None, (), "10.0.0.5:8000", None, metrics_url or None)


def test_our_server_keeps_the_platform_as_detected() -> None:
    assert target_platform(ServerChoice(), WITH_GPU).platform == WITH_GPU


def test_a_private_tritonserver_runs_tritons_backends_on_this_machines_gpus() -> None:
    choice = ServerChoice.from_flags("tritonserver", Path("/opt/tritonserver"), (), None)
    on_gpu = target_platform(choice, WITH_GPU).platform
    assert on_gpu.gpu_backends == TRITON_GPU_BACKENDS  # not only what this Python can run
    assert on_gpu.gpu_names == WITH_GPU.gpu_names and on_gpu.cpu_count == 16
    assert target_platform(choice, CPU_ONLY).platform.gpu_backends == frozenset()


def test_a_remote_servers_gpus_come_from_its_metrics_endpoint() -> None:
    read: list[str] = []

    def gpus(url: str) -> dict[str, int]:
        read.append(url)
        return {"GPU-1234": 80 * 2**30}

    target = target_platform(_remote("10.0.0.5:8002"), CPU_ONLY, gpus)
    assert read == ["10.0.0.5:8002"]
    assert target.platform.gpu_backends == TRITON_GPU_BACKENDS
    assert target.platform.gpu_names == ("GPU GPU-1234 (80.0 GiB)",)
    assert not target.platform.tensorrt and not target.platform.tensorrt_engines
    assert any("does not report its cores" in note for note in target.notes)


def test_a_remote_server_without_metrics_gets_cpu_instances_and_says_why() -> None:
    target = target_platform(_remote(), WITH_GPU, lambda url: pytest.fail("read"))
    assert target.platform.gpu_backends == frozenset()
    assert any("no --server-metrics-url" in note for note in target.notes)

    def unreachable(url: str) -> dict[str, int]:
        raise OSError("connection refused")

    target = target_platform(_remote("10.0.0.5:8002"), WITH_GPU, unreachable)
    assert target.platform.gpu_backends == frozenset()
    assert any("connection refused" in note for note in target.notes)


class _Server:
    def __init__(self, choice: ServerChoice, refusal: str | None) -> None:
        self.choice, self.refusal = choice, refusal
        self.loaded: list[tuple[mc.ModelConfig, str | None]] = []

    def load(self, config: mc.ModelConfig, model: str | None = None) -> None:
        self.loaded.append((config, model))
        if self.refusal is not None:
            raise ServerError(self.refusal)


def _base() -> mc.ModelConfig:
    config = mc.ModelConfig(name="m", backend="python", max_batch_size=8)
    config.instance_group.add(kind=mc.ModelInstanceGroup.KIND_AUTO, count=2)
    return config


def test_a_refused_gpu_load_leaves_gpu_instances_out_with_the_reason() -> None:
    triton = ServerChoice.from_flags("tritonserver", None, (), None)
    platform = target_platform(triton, WITH_GPU).platform
    server = _Server(triton, "instance group m_0 of model m specifies invalid GPU id 0")
    after, why = confirm_gpu(server, "m", _base(), "python", platform)  # type: ignore[arg-type]
    (probe, model), *_ = server.loaded
    assert model == "m"
    assert [(g.kind, g.count) for g in probe.instance_group] == [
        (mc.ModelInstanceGroup.KIND_GPU, 1)
    ]
    assert not after.gpu_for("python") and after.gpu_for("onnxruntime")
    assert why is not None and "invalid GPU id 0" in why

    accepted = _Server(triton, None)
    assert confirm_gpu(accepted, "m", _base(), "python", platform) == (platform, None)  # type: ignore[arg-type]


def test_our_own_server_is_not_asked_for_a_test_load() -> None:
    server = _Server(ServerChoice(), "never asked")
    assert confirm_gpu(server, "m", _base(), "pytorch", WITH_GPU) == (WITH_GPU, None)  # type: ignore[arg-type]
    assert server.loaded == []


def test_a_study_made_on_another_server_is_not_resumed_on_ours() -> None:
    """Measurements on Triton are not ours: the server joins the study's fingerprint (and so
    its default name) except on our own server, whose studies keep the names they had."""
    assert server_fingerprint(ServerChoice()) == {}
    triton = ServerChoice.from_flags("tritonserver", Path("/opt/tritonserver"), (), None)
    assert server_fingerprint(triton) == {"server": "tritonserver /opt/tritonserver"}
    assert server_fingerprint(_remote()) == {"server": "10.0.0.5:8000"}
