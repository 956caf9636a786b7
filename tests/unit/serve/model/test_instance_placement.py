"""Where instances go: Triton's placement of KIND_GPU / KIND_AUTO groups, and the load failing,
naming the group, where a GPU group cannot have its GPUs (never run on the CPU instead)."""

from __future__ import annotations

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from common.gpu import GpuDevice
from serve.backends.base import Backend
from serve.backends.onnxruntime import OnnxRuntimeBackend
from serve.backends.python import PythonBackend
from serve.backends.pytorch import PyTorchBackend
from serve.errors import ServeError
from serve.model.loader import PlannedInstance, plan_instances
from serve.platform import ServingPlatform

ORT_GPU = ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider")


def _platform(gpus: int, providers: tuple[str, ...] = ORT_GPU) -> ServingPlatform:
    devices = tuple(GpuDevice(i, "NVIDIA H200", f"GPU-{i}", 2**37) for i in range(gpus))
    return ServingPlatform(2, devices, providers, ("onnxruntime-gpu",), None)


def _plan(
    groups: str, platform: ServingPlatform, backend: Backend | None = None
) -> list[PlannedInstance]:
    config = text_format.Parse(f'name: "m" {groups}', mc.ModelConfig())
    return plan_instances(config, backend or OnnxRuntimeBackend(), lambda: platform)


def test_a_gpu_group_puts_count_instances_on_each_gpu_it_lists() -> None:
    planned = _plan(
        "instance_group [{ count: 1 kind: KIND_GPU gpus: [0] },"
        ' { name: "pair" count: 2 kind: KIND_GPU gpus: [1, 2] }]',
        _platform(3),
    )
    assert [(p.kind, p.device_id) for p in planned] == [
        ("KIND_GPU", 0),
        ("KIND_GPU", 1),
        ("KIND_GPU", 1),
        ("KIND_GPU", 2),
        ("KIND_GPU", 2),
    ]
    assert [p.name for p in planned] == ["m_0_0", "pair_0", "pair_1", "pair_2", "pair_3"]


def test_a_gpu_group_without_gpus_uses_every_visible_gpu() -> None:
    planned = _plan("instance_group [{ count: 2 kind: KIND_GPU }]", _platform(2))
    assert [p.device_id for p in planned] == [0, 0, 1, 1]


def test_kind_auto_is_the_gpu_where_the_backend_can_use_one_else_the_cpu() -> None:
    group = "instance_group [{ count: 1 kind: KIND_AUTO }]"
    assert [(p.kind, p.device_id) for p in _plan(group, _platform(1))] == [("KIND_GPU", 0)]
    assert [p.kind for p in _plan(group, _platform(0))] == ["KIND_CPU"]
    cpu_ort = _platform(1, ("CPUExecutionProvider",))
    assert [p.kind for p in _plan(group, cpu_ort)] == ["KIND_CPU"]


@pytest.mark.parametrize(
    ("platform", "backend", "reason"),
    [
        (_platform(0), OnnxRuntimeBackend(), "no GPU is visible"),
        (_platform(1, ("CPUExecutionProvider",)), OnnxRuntimeBackend(), "onnxruntime-gpu"),
        (_platform(0), PyTorchBackend(), "no GPU is visible"),
        (_platform(0), PythonBackend(), "no GPU is visible"),
    ],
)
def test_a_gpu_group_that_cannot_have_a_gpu_fails_the_load(
    platform: ServingPlatform, backend: Backend, reason: str
) -> None:
    with pytest.raises(ServeError) as info:
        _plan("instance_group [{ kind: KIND_CPU }, { kind: KIND_GPU }]", platform, backend)
    assert "m: instance_group[1] is KIND_GPU but" in info.value.message
    assert reason in info.value.message


def test_a_listed_gpu_the_machine_lacks_is_named() -> None:
    with pytest.raises(ServeError) as info:
        _plan("instance_group [{ kind: KIND_GPU gpus: [0, 3] }]", _platform(2))
    assert "instance_group[0].gpus lists [3]" in info.value.message
    assert "GPUs visible: [0, 1]" in info.value.message


def test_a_listed_gpu_is_checked_before_the_backend_can_use_gpus() -> None:
    # onnxruntime without CUDA on a machine with one GPU: the listed GPU it lacks is the
    # error (the other would hide it, as on the H200 without onnxruntime-gpu).
    cpu_ort = _platform(1, ("CPUExecutionProvider",))
    with pytest.raises(ServeError) as info:
        _plan("instance_group [{ kind: KIND_GPU gpus: [3] }]", cpu_ort)
    assert "instance_group[0].gpus lists [3]" in info.value.message


def test_a_torchscript_model_is_on_the_gpu_where_torch_has_cuda() -> None:
    import torch

    group = "instance_group [{ count: 1 kind: KIND_GPU gpus: [0] }]"
    if torch.cuda.is_available():
        planned = _plan(group, _platform(1), PyTorchBackend())
        assert [(p.kind, p.device_id) for p in planned] == [("KIND_GPU", 0)]
    else:  # a CPU build of torch (this project's test machines)
        with pytest.raises(ServeError, match="cannot use CUDA"):
            _plan(group, _platform(1), PyTorchBackend())
        auto = _plan("instance_group [{ kind: KIND_AUTO }]", _platform(1), PyTorchBackend())
        assert [p.kind for p in auto] == ["KIND_CPU"]


def test_a_python_model_may_have_gpu_instances() -> None:
    planned = _plan("instance_group [{ count: 1 kind: KIND_GPU }]", _platform(1), PythonBackend())
    assert [(p.kind, p.device_id) for p in planned] == [("KIND_GPU", 0)]


def test_a_group_without_a_kind_is_kind_auto() -> None:
    assert [p.kind for p in _plan("instance_group [{ count: 1 }]", _platform(0))] == ["KIND_CPU"]
    assert [p.kind for p in _plan("", _platform(1))] == ["KIND_GPU"]


def test_cpu_groups_never_ask_for_the_platform() -> None:
    def no_platform() -> ServingPlatform:
        raise AssertionError("a CPU-only config must not look for GPUs")

    config = text_format.Parse(
        'name: "m" instance_group [{ count: 3 kind: KIND_CPU }]', mc.ModelConfig()
    )
    planned = plan_instances(config, OnnxRuntimeBackend(), no_platform)
    assert [(p.name, p.kind) for p in planned] == [
        ("m_0", "KIND_CPU"),
        ("m_1", "KIND_CPU"),
        ("m_2", "KIND_CPU"),
    ]
