"""What the server finds of this machine's GPUs and GPU runtimes (serve/platform.py)."""

from __future__ import annotations

from common.gpu import GpuDevice
from serve.platform import ServingPlatform, cuda_visible, detect_platform


def test_cuda_visible_devices_orders_and_limits_the_gpus() -> None:
    gpus = tuple(GpuDevice(i, "x", f"GPU-{i:04d}-aaaa", 2**30) for i in range(3))
    assert cuda_visible(gpus, None) == gpus
    assert [g.index for g in cuda_visible(gpus, "2,0")] == [2, 0]
    assert [g.index for g in cuda_visible(gpus, "GPU-0001")] == [1]
    assert cuda_visible(gpus, "") == ()
    assert [g.index for g in cuda_visible(gpus, "1,7,2")] == [1]  # CUDA stops at a bad entry


def _platform(gpus: int, providers: tuple[str, ...], packages: tuple[str, ...]) -> ServingPlatform:
    devices = tuple(GpuDevice(i, "NVIDIA H200", f"GPU-{i}", 2**37) for i in range(gpus))
    return ServingPlatform(2, devices, providers, packages, None)


def test_platform_warnings_name_the_clash_and_the_missing_gpu_package() -> None:
    cpu = ("CPUExecutionProvider",)
    assert _platform(0, cpu, ("onnxruntime",)).warnings() == []
    (clash,) = _platform(0, cpu, ("onnxruntime", "onnxruntime-gpu")).warnings()
    assert "both onnxruntime and onnxruntime-gpu" in clash and "pip uninstall" in clash
    (missing,) = _platform(1, cpu, ("onnxruntime",)).warnings()
    assert "1 GPU(s) but onnxruntime has no CUDAExecutionProvider" in missing
    described = _platform(1, ("CUDAExecutionProvider", *cpu), ("onnxruntime-gpu",)).describe()
    assert described == "2 CPU cores; GPU 0: NVIDIA H200 (128.0 GiB); onnxruntime: CUDA"


def test_this_machine_is_detected_without_failing() -> None:
    here = detect_platform()
    assert here.cpu_count >= 1
    assert "CPUExecutionProvider" in here.onnxruntime_providers
    assert here.onnxruntime_packages  # the base dependency
    if not here.gpus:
        assert not here.onnxruntime_cuda and not here.onnxruntime_tensorrt
