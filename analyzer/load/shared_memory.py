"""`--shared-memory system | cuda`: the request data in shared memory, as perf_analyzer does.

One region per input holds that input's data for every input set, one after another (written
once); one region per output, `--output-shared-memory-size` bytes, receives that output (every
request writes the same region: the analyzer never reads outputs). The regions are registered
with the server over the run's protocol, the requests name them, and `release()` unregisters
and removes them, also after a failure or an interrupt. system: POSIX shared memory
(`tritonclient.utils.shared_memory`); cuda: memory on GPU 0 shared through CUDA IPC handles
(`tritonclient.utils.cuda_shared_memory`, which needs cuda-python and a GPU).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np
from tritonclient.utils import shared_memory as shm

from analyzer.errors import AnalyzerError
from protocol.client.control import ControlClient
from protocol.client.infer_body import InferInput, SharedMemoryRef
from protocol.errors import ClientError
from protocol.tensors import tensor_bytes

CUDA_DEVICE = 0  # the GPU the analyzer's CUDA regions live on, as perf_analyzer's default

SharedMemoryRefs = dict[str, SharedMemoryRef]


@dataclass(slots=True)
class SystemSharedMemory:
    """The regions of one run (`kind` system or cuda): created, registered, released once."""

    client: ControlClient
    prefix: str
    registered: list[str] = field(default_factory=list)
    handles: list[Any] = field(default_factory=list)
    kind: str = "system"

    async def release(self) -> list[str]:
        """Unregister every region this run registered and remove every region it created;
        the problems met (each also leaves the rest to be released)."""
        problems: list[str] = []
        registered, self.registered = self.registered, []
        for name in registered:
            try:
                if self.kind == "cuda":
                    await self.client.unregister_cuda_shared_memory(name)
                else:
                    await self.client.unregister_system_shared_memory(name)
            except ClientError as exc:
                problems.append(str(exc))
        handles, self.handles = self.handles, []
        module = _cuda_module() if self.kind == "cuda" and handles else shm
        for handle in handles:
            try:
                module.destroy_shared_memory_region(handle)
            except Exception as exc:  # each module raises its own SharedMemoryException
                problems.append(f"cannot remove a shared memory region: {exc}")
        return problems


def _cuda_module() -> ModuleType:
    """tritonclient's CUDA shared-memory utilities; AnalyzerError when they cannot load."""
    try:
        from tritonclient.utils import cuda_shared_memory
    except (ImportError, RuntimeError) as exc:
        raise AnalyzerError(f"--shared-memory cuda: {exc}") from None
    return cuda_shared_memory


def region_prefix() -> str:
    """Names no other run uses: this process and a random token."""
    return f"autotune_{os.getpid()}_{secrets.token_hex(4)}"


async def create_system_shared_memory(
    client: ControlClient,
    input_sets: Sequence[Sequence[InferInput]],
    outputs: Sequence[str],
    output_byte_size: int,
    kind: str = "system",
) -> tuple[SystemSharedMemory, list[SharedMemoryRefs]]:
    """Create and register the regions (`kind` system or cuda); per input set, where each
    input and output lies.

    AnalyzerError (after releasing what was made) when a region cannot be created or the
    server refuses to register it."""
    regions = SystemSharedMemory(client, region_prefix(), kind=kind)
    try:
        refs = await _create(regions, input_sets, outputs, output_byte_size)
    except BaseException:
        await regions.release()
        raise
    return regions, refs


async def _create(
    regions: SystemSharedMemory,
    input_sets: Sequence[Sequence[InferInput]],
    outputs: Sequence[str],
    output_byte_size: int,
) -> list[SharedMemoryRefs]:
    refs: list[SharedMemoryRefs] = [{} for _ in input_sets]
    names = [tensor.name for tensor in input_sets[0]] if input_sets else []
    for index, name in enumerate(names):
        blobs = [_blob(inputs, name) for inputs in input_sets]
        region = f"{regions.prefix}_input{index}"
        arrays = [np.frombuffer(blob, dtype=np.uint8) for blob in blobs if blob]
        await _register(regions, region, name, sum(len(b) for b in blobs), arrays)
        offset = 0
        for set_refs, blob in zip(refs, blobs, strict=True):
            set_refs[name] = SharedMemoryRef(region, len(blob), offset)
            offset += len(blob)
    for index, name in enumerate(outputs):
        region = f"{regions.prefix}_output{index}"
        await _register(regions, region, name, output_byte_size, [])
        for set_refs in refs:
            set_refs[name] = SharedMemoryRef(region, output_byte_size)
    return refs


def _blob(inputs: Sequence[InferInput], name: str) -> bytes:
    for tensor in inputs:
        if tensor.name == name:
            return tensor_bytes(tensor.datatype, tensor.data)
    raise AnalyzerError(f"input '{name}' is missing from an input set")


async def _register(
    regions: SystemSharedMemory, region: str, tensor: str, size: int, arrays: list[np.ndarray]
) -> None:
    """Create the region, write `arrays` into it one after another, register it."""
    if regions.kind == "cuda":
        await _register_cuda(regions, region, tensor, size, arrays)
        return
    key = f"/{region}"
    try:
        handle = shm.create_shared_memory_region(region, key, max(1, size))
    except shm.SharedMemoryException as exc:
        raise AnalyzerError(
            f"cannot create the shared memory region for tensor '{tensor}' ({key}, {size}"
            f" bytes): {exc}"
        ) from None
    regions.handles.append(handle)
    offset = 0
    for array in arrays:
        shm.set_shared_memory_region(handle, [array], offset=offset)
        offset += array.nbytes
    try:
        await regions.client.register_system_shared_memory(region, key, max(1, size))
    except ClientError as exc:
        raise AnalyzerError(f"--shared-memory system: tensor '{tensor}': {exc}") from None
    regions.registered.append(region)


async def _register_cuda(
    regions: SystemSharedMemory, region: str, tensor: str, size: int, arrays: list[np.ndarray]
) -> None:
    cuda = _cuda_module()
    try:
        handle = cuda.create_shared_memory_region(region, max(1, size), CUDA_DEVICE)
        regions.handles.append(handle)
        if arrays:
            cuda.set_shared_memory_region(handle, arrays)
        raw_handle = cuda.get_raw_handle(handle)
    except cuda.CudaSharedMemoryException as exc:
        raise AnalyzerError(
            f"cannot create the CUDA shared memory region for tensor '{tensor}' ({size} bytes"
            f" on GPU {CUDA_DEVICE}): {exc}"
        ) from None
    try:
        await regions.client.register_cuda_shared_memory(
            region, raw_handle, CUDA_DEVICE, max(1, size)
        )
    except ClientError as exc:
        raise AnalyzerError(f"--shared-memory cuda: tensor '{tensor}': {exc}") from None
    regions.registered.append(region)
