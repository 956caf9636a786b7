"""GPU discovery through NVML, with a stand-in for the pynvml module (no GPU here)."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from common.gpu import GpuDevice, list_gpus, process_gpu_memory_bytes


class FakeNvmlError(Exception):
    pass


@dataclass
class FakeNvml:
    """pynvml's functions over `names`; `processes[index]` = [(pid, bytes)]."""

    names: list[str]
    processes: dict[int, list[tuple[int, int | None]]]
    fail_init: bool = False
    initialised: int = 0
    NVMLError: type[Exception] = FakeNvmlError

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise FakeNvmlError("Driver Not Loaded")
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.initialised -= 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.names)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, handle: int) -> bytes:
        return self.names[handle].encode()  # older bindings give bytes

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return f"GPU-{handle:04d}-aaaa"

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return SimpleNamespace(total=80 * 2**30, used=0)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Any]:
        return [
            SimpleNamespace(pid=pid, usedGpuMemory=used)
            for pid, used in self.processes.get(handle, [])
        ]


def test_gpus_are_listed_with_name_uuid_and_memory_and_nvml_is_shut_down() -> None:
    nvml = FakeNvml(["NVIDIA H200", "NVIDIA L4"], {})
    gpus = list_gpus(nvml)
    assert gpus == (
        GpuDevice(0, "NVIDIA H200", "GPU-0000-aaaa", 80 * 2**30),
        GpuDevice(1, "NVIDIA L4", "GPU-0001-aaaa", 80 * 2**30),
    )
    assert gpus[0].describe() == "GPU 0: NVIDIA H200 (80.0 GiB)"
    assert nvml.initialised == 0


def test_no_driver_means_no_gpu_and_no_memory_figure() -> None:
    nvml = FakeNvml(["NVIDIA H200"], {}, fail_init=True)
    assert list_gpus(nvml) == ()
    assert process_gpu_memory_bytes({1}, nvml) is None


def test_process_memory_adds_the_given_processes_over_every_gpu() -> None:
    nvml = FakeNvml(["a", "b"], {0: [(10, 300), (11, 5000)], 1: [(10, 200), (12, None)]})
    assert process_gpu_memory_bytes({10, 12}, nvml) == 500
    assert process_gpu_memory_bytes({99}, nvml) == 0
    assert process_gpu_memory_bytes({10}, FakeNvml([], {})) is None
