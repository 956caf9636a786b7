"""The machine's NVIDIA GPUs through NVML (nvidia-ml-py, imported as `pynvml`, the `gpu` extra).

Without the package, without a driver, or with no GPU, there are none: every function here
answers "nothing" instead of failing, so CPU-only paths never need the package.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("common.gpu")


@dataclass(frozen=True, slots=True)
class GpuDevice:
    """One GPU as NVML sees it: every GPU of the machine, whatever CUDA_VISIBLE_DEVICES
    says (serve/platform maps them to CUDA's numbering)."""

    index: int  # NVML's index, which CUDA_VISIBLE_DEVICES-free processes share with CUDA
    name: str
    uuid: str
    memory_total_bytes: int

    def describe(self) -> str:
        """E.g. 'GPU 0: NVIDIA H200 (139.8 GiB)'."""
        return f"GPU {self.index}: {self.name} ({self.memory_total_bytes / 2**30:.1f} GiB)"


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value  # older bindings gave bytes


@functools.cache
def import_nvml() -> Any | None:
    """The `pynvml` module, or None when nvidia-ml-py is not installed (tried once)."""
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


@contextlib.contextmanager
def nvml_session(nvml: Any | None = None) -> Iterator[Any | None]:
    """NVML initialised for the block (its init and shutdown count references), or None when
    there is no NVML: no package, no driver."""
    nvml = nvml if nvml is not None else import_nvml()
    if nvml is None:
        yield None
        return
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        log.debug("NVML is not available: %s", exc)
        yield None
        return
    try:
        yield nvml
    finally:
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()


def list_gpus(nvml: Any | None = None) -> tuple[GpuDevice, ...]:
    """Every GPU NVML sees; () without NVML. `nvml`: the pynvml module or a stand-in."""
    with nvml_session(nvml) as session:
        if session is None:
            return ()
        try:
            devices = []
            for index in range(session.nvmlDeviceGetCount()):
                handle = session.nvmlDeviceGetHandleByIndex(index)
                devices.append(
                    GpuDevice(
                        index=index,
                        name=_text(session.nvmlDeviceGetName(handle)),
                        uuid=_text(session.nvmlDeviceGetUUID(handle)),
                        memory_total_bytes=int(session.nvmlDeviceGetMemoryInfo(handle).total),
                    )
                )
        except session.NVMLError as exc:
            log.warning("NVML failed listing the GPUs: %s", exc)
            return ()
        return tuple(devices)


def process_gpu_memory_bytes(pids: Collection[int], nvml: Any | None = None) -> int | None:
    """GPU memory held by the processes `pids` (a server and its children) on every GPU, as
    NVML's compute-process list reports it; None without NVML or without a GPU (a process NVML
    cannot attribute memory to, as under some containers, counts as 0)."""
    with nvml_session(nvml) as session:
        if session is None:
            return None
        try:
            count = session.nvmlDeviceGetCount()
            if count == 0:
                return None
            total = 0
            for index in range(count):
                handle = session.nvmlDeviceGetHandleByIndex(index)
                for process in session.nvmlDeviceGetComputeRunningProcesses(handle):
                    used = getattr(process, "usedGpuMemory", None)
                    if process.pid in pids and used:
                        total += int(used)
        except session.NVMLError as exc:
            log.warning("NVML failed reading the GPU memory of processes: %s", exc)
            return None
        return total
