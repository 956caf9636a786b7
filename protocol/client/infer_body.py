"""KServe v2 REST infer request bodies, with Triton's binary tensor data extension.

A body is a JSON header optionally followed by the binary tensors in input order; the
`Inference-Header-Content-Length` HTTP header then gives the JSON header's length. Requests
look like perf_analyzer's: `"id": ""` and every model output requested, in binary by default.
With the shared-memory extension an input names the region holding its data instead of
carrying it, and an output the region receiving it (`SharedMemoryRef`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import orjson

from protocol.errors import ProtocolError
from protocol.headers import (
    BINARY_DATA,
    BINARY_DATA_SIZE,
    SHARED_MEMORY_BYTE_SIZE,
    SHARED_MEMORY_OFFSET,
    SHARED_MEMORY_REGION,
)
from protocol.tensors import tensor_bytes


class InferInput(Protocol):
    """One input of a request: `data.shape == shape`; BYTES data is an object array of bytes."""

    @property
    def name(self) -> str: ...
    @property
    def datatype(self) -> str: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def data(self) -> np.ndarray: ...


@dataclass(frozen=True, slots=True)
class SharedMemoryRef:
    """Where a tensor's data lies (an input) or goes (an output): a registered region."""

    region: str
    byte_size: int
    offset: int = 0

    def parameters(self) -> dict[str, str | int]:
        """The tensor parameters naming the region."""
        parameters: dict[str, str | int] = {
            SHARED_MEMORY_REGION: self.region,
            SHARED_MEMORY_BYTE_SIZE: self.byte_size,
        }
        if self.offset:
            parameters[SHARED_MEMORY_OFFSET] = self.offset
        return parameters


def encode_infer_body(
    inputs: Sequence[InferInput],
    outputs: Sequence[str],
    binary_inputs: bool = True,
    binary_outputs: bool = True,
    shared_memory: Mapping[str, SharedMemoryRef] | None = None,
) -> tuple[bytes, int | None]:
    """(body, JSON header length); the length is None when the whole body is JSON.

    `shared_memory` maps input and output names to their regions; those inputs carry no data
    and those outputs come back in their regions.
    ProtocolError when a BYTES input asked for as JSON holds bytes that are not UTF-8 text."""
    regions = shared_memory or {}
    entries: list[dict[str, Any]] = []
    blobs: list[bytes] = []
    for tensor in inputs:
        entry: dict[str, Any] = {
            "name": tensor.name,
            "shape": list(tensor.shape),
            "datatype": tensor.datatype,
        }
        ref = regions.get(tensor.name)
        if ref is not None:
            entry["parameters"] = ref.parameters()
        elif binary_inputs:
            blob = tensor_bytes(tensor.datatype, tensor.data)
            entry["parameters"] = {BINARY_DATA_SIZE: len(blob)}
            blobs.append(blob)
        else:
            entry["data"] = _json_values(tensor)
        entries.append(entry)
    header = {
        "id": "",
        "inputs": entries,
        "outputs": [_output_entry(name, regions.get(name), binary_outputs) for name in outputs],
    }
    header_bytes = orjson.dumps(header)
    if not blobs:
        return header_bytes, None
    return b"".join([header_bytes, *blobs]), len(header_bytes)


def _output_entry(name: str, ref: SharedMemoryRef | None, binary: bool) -> dict[str, Any]:
    parameters = ref.parameters() if ref is not None else {BINARY_DATA: binary}
    return {"name": name, "parameters": parameters}


def _json_values(tensor: InferInput) -> list[Any]:
    flat = tensor.data.reshape(-1)
    if tensor.datatype != "BYTES":
        return flat.tolist()
    try:
        return [element.decode() for element in flat]
    except UnicodeDecodeError:
        raise ProtocolError(
            f"input '{tensor.name}' holds bytes that are not UTF-8 text, which JSON cannot carry"
        ) from None
