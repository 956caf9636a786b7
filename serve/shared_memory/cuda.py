"""CUDA shared memory regions (Triton's CUDA shared memory extension).

A client allocates GPU memory, exports it as a CUDA IPC handle (`cudaIpcGetMemHandle`, as
`tritonclient.utils.cuda_shared_memory` does) and registers the handle with the device it is
on and its size. The server opens the handle (`cudaIpcOpenMemHandle`, through cupy), reads
inputs from it and writes outputs into it with device <-> host copies, and closes it when the
region is unregistered; the client keeps owning the memory. The handle cannot be opened in the
process that made it, and only where CUDA and cupy are: elsewhere the register fails, naming
the region and what is missing.
"""

from __future__ import annotations

import base64
import binascii
import threading
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from serve.errors import ServeError
from serve.platform import detect_platform
from serve.shared_memory.region import HeldRegion

IPC_HANDLE_SIZE = 64  # bytes of a cudaIpcMemHandle_t


class DeviceMemory(Protocol):
    """GPU memory opened from an IPC handle."""

    def read(self, offset: int, byte_size: int) -> bytes: ...

    def write(self, offset: int, data: bytes | memoryview) -> None: ...

    def close(self) -> None: ...


# (IPC handle bytes, device id) -> the memory; raises CudaUnavailable or RuntimeError.
Opener = Callable[[bytes, int], DeviceMemory]


class CudaUnavailable(Exception):
    """What this machine lacks to open CUDA IPC handles."""


def decode_handle(raw: Any, what: str) -> bytes:
    """The IPC handle from HTTP's `{"b64": ...}` (or gRPC's bytes), checked for its size."""
    if isinstance(raw, dict):
        raw = raw.get("b64")
    if isinstance(raw, str):
        try:
            raw = base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            raise ServeError.invalid(f"{what}: 'raw_handle' is not valid base64") from None
    if not isinstance(raw, bytes) or len(raw) != IPC_HANDLE_SIZE:
        size = len(raw) if isinstance(raw, bytes) else "no"
        raise ServeError.invalid(
            f"{what}: 'raw_handle' must be a {IPC_HANDLE_SIZE}-byte cudaIpcMemHandle "
            f"({size} bytes given)"
        )
    return raw


class _CupyMemory:
    """Device memory opened with cupy; every copy runs with the region's device current."""

    def __init__(self, handle: bytes, device_id: int) -> None:
        try:
            import cupy
        except ImportError:
            raise CudaUnavailable(
                "opening CUDA IPC handles needs cupy (pip install cupy-cuda12x or cupy-cuda13x)"
            ) from None
        runtime = cupy.cuda.runtime
        try:
            count = runtime.getDeviceCount()
        except runtime.CUDARuntimeError as exc:
            raise CudaUnavailable(f"CUDA is not usable here: {exc}") from None
        if not 0 <= device_id < count:
            raise CudaUnavailable(f"device_id {device_id} is not a CUDA device here ({count})")
        self._runtime = runtime
        self._device = cupy.cuda.Device(device_id)
        with self._device:
            self._pointer: int = runtime.ipcOpenMemHandle(handle)
        self._lock = threading.Lock()

    def read(self, offset: int, byte_size: int) -> bytes:
        host = np.empty(byte_size, np.uint8)
        with self._lock, self._device:
            self._runtime.memcpy(
                host.ctypes.data,
                self._pointer + offset,
                byte_size,
                self._runtime.memcpyDeviceToHost,
            )
        return host.tobytes()

    def write(self, offset: int, data: bytes | memoryview) -> None:
        host = np.frombuffer(data, np.uint8)
        with self._lock, self._device:
            self._runtime.memcpy(
                self._pointer + offset,
                host.ctypes.data,
                host.nbytes,
                self._runtime.memcpyHostToDevice,
            )

    def close(self) -> None:
        with self._lock, self._device:
            self._runtime.ipcCloseMemHandle(self._pointer)


def open_with_cupy(handle: bytes, device_id: int) -> DeviceMemory:
    """The default opener: this machine's GPUs through cupy."""
    if not detect_platform().gpus:
        raise CudaUnavailable("this machine has no GPU (NVML finds none); use system shared memory")
    return _CupyMemory(handle, device_id)


class CudaRegion(HeldRegion):
    """One registered CUDA region: the client's device memory, opened from its handle."""

    kind = "cuda"

    def __init__(self, name: str, device_id: int, byte_size: int, memory: DeviceMemory) -> None:
        super().__init__(name, byte_size)
        self.device_id = device_id
        self._memory = memory

    def status(self) -> dict[str, Any]:
        return {"name": self.name, "device_id": self.device_id, "byte_size": self.byte_size}

    def read(self, offset: int, byte_size: int, label: str) -> bytes:
        self.check_range(offset, byte_size, label)
        return self._memory.read(offset, byte_size)

    def write(self, offset: int, data: bytes | memoryview, label: str) -> None:
        self.check_range(offset, memoryview(data).nbytes, label)
        self._memory.write(offset, data)

    def _close(self) -> None:
        self._memory.close()
