"""What this machine can run models on: CPU cores, GPUs, and the GPU runtimes installed.

Found once per process and only when asked (a CPU-only path never imports NVML or asks
onnxruntime for its providers). The server uses it to place KIND_GPU / KIND_AUTO instances,
the tuner to decide whether GPU instances and TensorRT precisions are part of its space.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
from dataclasses import dataclass
from importlib import metadata

from common.cpu import native_bf16, usable_cpu_count
from common.gpu import GpuDevice, list_gpus

CUDA_PROVIDER = "CUDAExecutionProvider"
TENSORRT_PROVIDER = "TensorrtExecutionProvider"
log = logging.getLogger("serve.platform")

# Distributions that each install the `onnxruntime` module: with both, whichever was
# installed last owns the files, and the other's metadata lies about what is there.
ONNXRUNTIME_PACKAGES = ("onnxruntime", "onnxruntime-gpu")


@dataclass(frozen=True, slots=True)
class ServingPlatform:
    """What `detect_platform` found: CPU cores and bfloat16 support, GPUs, onnxruntime's execution
    providers and packages, and the TensorRT version (None: not installed)."""

    cpu_count: int
    gpus: tuple[GpuDevice, ...]  # as CUDA numbers them in this process (CUDA_VISIBLE_DEVICES)
    onnxruntime_providers: tuple[str, ...]
    onnxruntime_packages: tuple[str, ...]  # installed distributions of ONNXRUNTIME_PACKAGES
    tensorrt_version: str | None  # the tensorrt Python package, for model.plan files
    cpu_bf16: bool = False  # the CPU has native bfloat16 arithmetic (AVX-512 BF16 / AMX)

    @property
    def gpu_ids(self) -> tuple[int, ...]:
        return tuple(range(len(self.gpus)))

    @property
    def onnxruntime_cuda(self) -> bool:
        """onnxruntime can run a session on a GPU here."""
        return bool(self.gpus) and CUDA_PROVIDER in self.onnxruntime_providers

    @property
    def onnxruntime_tensorrt(self) -> bool:
        return bool(self.gpus) and TENSORRT_PROVIDER in self.onnxruntime_providers

    def warnings(self) -> list[str]:
        """What is installed wrongly for the GPUs this machine has (or has not)."""
        found: list[str] = []
        if len(self.onnxruntime_packages) > 1:
            found.append(
                "both onnxruntime and onnxruntime-gpu are installed; they share one module and "
                "clash: keep one (on a GPU machine: pip uninstall -y onnxruntime "
                "onnxruntime-gpu && pip install onnxruntime-gpu)"
            )
        if self.gpus and CUDA_PROVIDER not in self.onnxruntime_providers:
            found.append(
                f"{len(self.gpus)} GPU(s) but onnxruntime has no {CUDA_PROVIDER}: install "
                "onnxruntime-gpu in place of onnxruntime to run ONNX models on them"
            )
        return found

    def describe(self) -> str:
        """E.g. '2 CPU cores; GPU 0: NVIDIA H200 (139.8 GiB); onnxruntime: CUDA, TensorRT'."""
        parts = [f"{self.cpu_count} CPU cores" + (" (bf16)" if self.cpu_bf16 else "")]
        parts += [gpu.describe() for gpu in self.gpus] or ["no GPU"]
        accelerators = [
            label
            for provider, label in ((CUDA_PROVIDER, "CUDA"), (TENSORRT_PROVIDER, "TensorRT"))
            if provider in self.onnxruntime_providers
        ]
        if accelerators:
            parts.append("onnxruntime: " + ", ".join(accelerators))
        if self.tensorrt_version:
            parts.append(f"tensorrt {self.tensorrt_version}")
        return "; ".join(parts)


def cuda_visible(gpus: tuple[GpuDevice, ...], visible: str | None) -> tuple[GpuDevice, ...]:
    """The GPUs CUDA shows this process, in CUDA's order: `visible` is CUDA_VISIBLE_DEVICES
    (indices or UUIDs, comma-separated; CUDA stops at the first entry it cannot find)."""
    if visible is None:
        return gpus
    shown: list[GpuDevice] = []
    for entry in (e.strip() for e in visible.split(",")):
        match = next(
            (g for g in gpus if entry == str(g.index) or (entry and g.uuid.startswith(entry))),
            None,
        )
        if match is None or match in shown:
            break
        shown.append(match)
    return tuple(shown)


def _installed(distribution: str) -> bool:
    try:
        metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return False
    return True


def _onnxruntime_providers() -> tuple[str, ...]:
    try:
        import onnxruntime
    except ImportError:
        return ()
    return tuple(onnxruntime.get_available_providers())


def _tensorrt_version() -> str | None:
    if importlib.util.find_spec("tensorrt") is None:
        return None
    try:
        return metadata.version("tensorrt")
    except metadata.PackageNotFoundError:
        return "unknown"


@functools.cache
def detect_platform() -> ServingPlatform:
    """This machine, found on the first call (NVML, onnxruntime's providers, tensorrt)."""
    gpus = cuda_visible(list_gpus(), os.environ.get("CUDA_VISIBLE_DEVICES"))
    found = ServingPlatform(
        cpu_count=usable_cpu_count(),
        gpus=gpus,
        onnxruntime_providers=_onnxruntime_providers(),
        onnxruntime_packages=tuple(p for p in ONNXRUNTIME_PACKAGES if _installed(p)),
        tensorrt_version=_tensorrt_version(),
        cpu_bf16=native_bf16(),
    )
    log.info("platform: %s", found.describe())
    for warning in found.warnings():
        log.warning("%s", warning)
    return found
