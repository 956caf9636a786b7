"""Tensors in shared memory: recognising the parameters (both codecs call `region_slice`),
reading inputs before the model sees a request, writing outputs after it answers."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from protocol.datatypes import ELEMENT_SIZE, WIRE_DTYPES
from protocol.errors import ProtocolError
from protocol.headers import (
    BINARY_DATA,
    SHARED_MEMORY_BYTE_SIZE,
    SHARED_MEMORY_OFFSET,
    SHARED_MEMORY_REGION,
)
from protocol.tensors import parse_bytes_tensor, serialize_bytes_tensor
from serve.errors import ServeError
from serve.inference import InferRequest, InferResponse, OutputTensor, RegionSlice
from serve.model.classification import CLASSIFICATION
from serve.shared_memory.region import HeldRegion
from serve.shared_memory.registry import SharedMemoryRegistry

Completion = Callable[[InferResponse | ServeError], None]


def region_slice(parameters: Mapping[str, Any], label: str) -> RegionSlice | None:
    """The shared-memory range a tensor's parameters name; None when they name none.

    `label` names the tensor in errors ("input 'INPUT0'"). Offset defaults to 0; the byte
    size is required with a region, as in Triton."""
    region = parameters.get(SHARED_MEMORY_REGION)
    if region is None:
        for key in (SHARED_MEMORY_OFFSET, SHARED_MEMORY_BYTE_SIZE):
            if key in parameters:
                raise ServeError.invalid(
                    f"{label}: '{key}' can not be specified without '{SHARED_MEMORY_REGION}'"
                )
        return None
    if type(region) is not str or not region:
        raise ServeError.invalid(f"{label}: '{SHARED_MEMORY_REGION}' must be a region name")
    if SHARED_MEMORY_BYTE_SIZE not in parameters:
        raise ServeError.invalid(
            f"{label}: '{SHARED_MEMORY_BYTE_SIZE}' must be specified along with"
            f" '{SHARED_MEMORY_REGION}'"
        )
    byte_size = _natural(parameters[SHARED_MEMORY_BYTE_SIZE], SHARED_MEMORY_BYTE_SIZE, label)
    offset = _natural(parameters.get(SHARED_MEMORY_OFFSET, 0), SHARED_MEMORY_OFFSET, label)
    return RegionSlice(region, offset, byte_size)


def output_region(parameters: Mapping[str, Any], name: str) -> RegionSlice | None:
    """`region_slice` for a requested output, which cannot also be classified or binary."""
    where = region_slice(parameters, f"output '{name}'")
    if where is not None:
        if CLASSIFICATION in parameters:
            raise ServeError.invalid(
                f"output '{name}' can't set both '{SHARED_MEMORY_REGION}' and '{CLASSIFICATION}'"
            )
        if parameters.get(BINARY_DATA) is True:
            raise ServeError.invalid(
                f"output '{name}' can't set both '{SHARED_MEMORY_REGION}' and '{BINARY_DATA}'"
            )
    return where


def uses_shared_memory(request: InferRequest) -> bool:
    """Whether the request names a shared-memory region for any input or requested output (then
    it must be bound to its regions before it runs)."""
    if request.region_inputs:
        return True
    outputs = request.requested_outputs
    return outputs is not None and any(o.region is not None for o in outputs)


def bind_regions(
    registry: SharedMemoryRegistry, request: InferRequest, on_done: Completion
) -> tuple[Completion, Callable[[], None]]:
    """Read the request's shared-memory inputs into `request.inputs` and hold its output
    regions. Returns the completion to pass on (it writes the outputs, then calls `on_done`)
    and a release for when the request is refused before it is queued."""
    for name, (shape, where) in request.region_inputs.items():
        datatype = request.input_datatypes.get(name, "")
        request.inputs[name] = _read_input(registry, name, datatype, shape, where)
    request.region_inputs = {}

    held: dict[str, tuple[HeldRegion, RegionSlice]] = {}

    def release() -> None:
        for region, _ in held.values():
            registry.release_region(region)
        held.clear()

    try:
        for output in request.requested_outputs or ():
            if output.region is not None:
                region = registry.acquire(output.region, f"output '{output.name}'")
                held[output.name] = (region, output.region)
    except ServeError:
        release()
        raise
    if not held:
        return on_done, release

    def complete(result: InferResponse | ServeError) -> None:
        try:
            if isinstance(result, InferResponse):
                result = _write_outputs(registry, result, held)
        finally:
            release()
        on_done(result)

    return complete, release


def _read_input(
    registry: SharedMemoryRegistry,
    name: str,
    datatype: str,
    shape: tuple[int, ...],
    where: RegionSlice,
) -> np.ndarray:
    label = f"input '{name}'"
    count = math.prod(shape)
    if datatype != "BYTES":
        dtype = WIRE_DTYPES.get(datatype)
        if dtype is None:
            raise ServeError.invalid(f"{label}: unknown datatype '{datatype}'")
        expected = count * ELEMENT_SIZE[datatype]
        if where.byte_size != expected:
            raise ServeError.invalid(
                f"{label}: {SHARED_MEMORY_BYTE_SIZE} {where.byte_size} does not match shape"
                f" {list(shape)} of {datatype} ({expected} bytes)"
            )
    data = registry.read(where, label)
    if datatype == "BYTES":
        try:
            return parse_bytes_tensor(data, 0, len(data), count, label).reshape(shape)
        except ProtocolError as exc:
            raise ServeError.invalid(str(exc)) from None
    return np.frombuffer(data, dtype, count).reshape(shape)


def _write_outputs(
    registry: SharedMemoryRegistry,
    response: InferResponse,
    held: Mapping[str, tuple[HeldRegion, RegionSlice]],
) -> InferResponse | ServeError:
    outputs: list[OutputTensor] = []
    try:
        for output in response.outputs:
            entry = held.get(output.name)
            if entry is None:
                outputs.append(output)
                continue
            region, where = entry
            data = _wire_bytes(output)
            size = memoryview(data).nbytes
            if size > where.byte_size:
                raise ServeError.invalid(
                    f"shared memory size specified with the request for output '{output.name}'"
                    f" ({where.byte_size} bytes) should be at least {size} bytes to hold the"
                    " results"
                )
            registry.write(region, where.offset, data, f"output '{output.name}'")
            outputs.append(OutputTensor(output.name, output.datatype, output.data, where))
    except ServeError as exc:
        return exc
    response.outputs = outputs
    return response


def _wire_bytes(output: OutputTensor) -> bytes | memoryview:
    if output.datatype == "BYTES":
        return serialize_bytes_tensor(output.data)
    dtype = WIRE_DTYPES.get(output.datatype)
    if dtype is None:
        raise ServeError.internal(f"output '{output.name}': unknown datatype '{output.datatype}'")
    array = np.ascontiguousarray(output.data, dtype=dtype)
    return array.reshape(-1).view(np.uint8).data


def _natural(value: Any, key: str, label: str) -> int:
    if type(value) is not int or value < 0:
        raise ServeError.invalid(f"{label}: '{key}' must be a non-negative integer, got {value!r}")
    return value
