"""CUDA shared-memory regions in the registry, with device memory stood in by host bytes (the
opener is the registry's one dependency on CUDA), and the default opener on this machine."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from serve.errors import ErrorKind, ServeError
from serve.inference import InferRequest, InferResponse, OutputTensor, RegionSlice, RequestedOutput
from serve.platform import detect_platform
from serve.shared_memory.cuda import DeviceMemory, open_with_cupy
from serve.shared_memory.registry import SharedMemoryRegistry
from serve.shared_memory.tensors import bind_regions

HANDLE = bytes(range(64))


class FakeDevice:
    """Device memory as host bytes; remembers what was opened and whether it was closed."""

    def __init__(self, size: int) -> None:
        self.memory = bytearray(size)
        self.closed = False

    def read(self, offset: int, byte_size: int) -> bytes:
        return bytes(self.memory[offset : offset + byte_size])

    def write(self, offset: int, data: bytes | memoryview) -> None:
        view = memoryview(data).cast("B")
        self.memory[offset : offset + len(view)] = view

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def opened() -> dict[tuple[bytes, int], FakeDevice]:
    return {}


@pytest.fixture
def registry(
    tmp_path: Path, opened: dict[tuple[bytes, int], FakeDevice]
) -> Iterator[SharedMemoryRegistry]:
    def opener(handle: bytes, device_id: int) -> DeviceMemory:
        opened[handle, device_id] = FakeDevice(256)
        return opened[handle, device_id]

    (tmp_path / "sys").write_bytes(bytes(64))
    registry = SharedMemoryRegistry(tmp_path, opener)
    yield registry
    registry.close()


def test_register_status_and_unregister_by_kind(
    registry: SharedMemoryRegistry, opened: dict[tuple[bytes, int], FakeDevice]
) -> None:
    # HTTP sends the handle in base64 ({"b64": ...}); gRPC sends its bytes.
    registry.register_cuda("gpu_in", {"b64": base64.b64encode(HANDLE).decode()}, 1, 128)
    registry.register_cuda("gpu_out", HANDLE[::-1], 0, 256)
    registry.register("sys", "/sys", 0, 64)
    assert set(opened) == {(HANDLE, 1), (HANDLE[::-1], 0)}
    assert registry.status(kind="cuda") == [
        {"name": "gpu_in", "device_id": 1, "byte_size": 128},
        {"name": "gpu_out", "device_id": 0, "byte_size": 256},
    ]
    assert [r["name"] for r in registry.status()] == ["sys"]  # system's status: its own only
    with pytest.raises(ServeError, match="Unable to find cuda shared memory region: 'sys'"):
        registry.status("sys", "cuda")
    # One namespace for both kinds, as in Triton.
    with pytest.raises(ServeError, match="'sys' already in manager") as info:
        registry.register_cuda("sys", HANDLE, 0, 64)
    assert info.value.kind is ErrorKind.ALREADY_EXISTS
    registry.unregister()  # every system region: the CUDA ones stay
    assert len(registry.status(kind="cuda")) == 2
    registry.unregister("gpu_in", "cuda")
    assert opened[HANDLE, 1].closed and not opened[HANDLE[::-1], 0].closed
    registry.unregister(kind="cuda")
    assert opened[HANDLE[::-1], 0].closed and registry.status(kind="cuda") == []


def test_inputs_are_read_from_and_outputs_written_to_device_memory(
    registry: SharedMemoryRegistry, opened: dict[tuple[bytes, int], FakeDevice]
) -> None:
    registry.register_cuda("gpu", HANDLE, 0, 256)
    device = opened[HANDLE, 0]
    values = np.arange(4, dtype=np.float32)
    device.write(16, values.tobytes())
    request = InferRequest(
        model_name="m",
        model_version="",
        inputs={},
        input_datatypes={"X": "FP32"},
        requested_outputs=[RequestedOutput("Y", {}, RegionSlice("gpu", 64, 16))],
        region_inputs={"X": ((1, 4), RegionSlice("gpu", 16, 16))},
    )
    results: list[InferResponse | ServeError] = []
    complete, _ = bind_regions(registry, request, results.append)
    np.testing.assert_array_equal(request.inputs["X"], values.reshape(1, 4))
    registry.unregister("gpu", "cuda")  # in flight: the region stays open for the output
    assert not device.closed
    complete(InferResponse("m", "1", [OutputTensor("Y", "FP32", values * 2)]))
    assert isinstance(results[0], InferResponse)
    assert np.frombuffer(device.read(64, 16), np.float32).tolist() == [0.0, 2.0, 4.0, 6.0]
    assert device.closed


@pytest.mark.parametrize(
    ("handle", "device_id", "byte_size", "fragment"),
    [
        (b"short", 0, 64, "'raw_handle' must be a 64-byte cudaIpcMemHandle (5 bytes given)"),
        ({"b64": "not base64!"}, 0, 64, "'raw_handle' is not valid base64"),
        (HANDLE, -1, 64, "'device_id' must be a non-negative integer"),
        (HANDLE, 0, 0, "'byte_size' must be at least 1"),
    ],
)
def test_bad_registrations_name_the_region(
    registry: SharedMemoryRegistry, handle: object, device_id: int, byte_size: int, fragment: str
) -> None:
    with pytest.raises(ServeError) as info:
        registry.register_cuda("r1", handle, device_id, byte_size)
    assert info.value.kind is ErrorKind.INVALID_ARGUMENT
    assert "failed to register CUDA shared memory region 'r1'" in info.value.message
    assert fragment in info.value.message


def test_an_opener_that_fails_fails_the_register_naming_the_region(tmp_path: Path) -> None:
    def opener(handle: bytes, device_id: int) -> DeviceMemory:
        raise RuntimeError("cudaErrorInvalidResourceHandle")

    registry = SharedMemoryRegistry(tmp_path, opener)
    with pytest.raises(ServeError, match="region 'r1': RuntimeError: cudaErrorInvalid"):
        registry.register_cuda("r1", HANDLE, 0, 64)
    assert registry.status(kind="cuda") == []


@pytest.mark.skipif(
    bool(detect_platform().gpus), reason="shows the refusal on a machine without GPU"
)
def test_without_a_gpu_the_default_opener_refuses_clearly(tmp_path: Path) -> None:
    registry = SharedMemoryRegistry(tmp_path, open_with_cupy)
    with pytest.raises(ServeError) as info:
        registry.register_cuda("gpu", HANDLE, 0, 64)
    assert info.value.kind is ErrorKind.UNSUPPORTED
    assert info.value.message == (
        "failed to register CUDA shared memory region 'gpu': this machine has no GPU (NVML "
        "finds none); use system shared memory"
    )
