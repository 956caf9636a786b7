"""KServe v2 REST infer request bodies, with Triton's binary tensor data extension.

A body is a JSON header optionally followed by the binary tensors in input order; the
`Inference-Header-Content-Length` HTTP header then gives the JSON header's length. Requests
look like perf_analyzer's: `"id": ""` and every model output requested, in binary by default.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import orjson

from protocol.errors import ProtocolError
from protocol.headers import BINARY_DATA, BINARY_DATA_SIZE
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


def encode_infer_body(
    inputs: Sequence[InferInput],
    outputs: Sequence[str],
    binary_inputs: bool = True,
    binary_outputs: bool = True,
) -> tuple[bytes, int | None]:
    """(body, JSON header length); the length is None when the whole body is JSON.

    ProtocolError when a BYTES input asked for as JSON holds bytes that are not UTF-8 text."""
    entries: list[dict[str, Any]] = []
    blobs: list[bytes] = []
    for tensor in inputs:
        entry: dict[str, Any] = {
            "name": tensor.name,
            "shape": list(tensor.shape),
            "datatype": tensor.datatype,
        }
        if binary_inputs:
            blob = tensor_bytes(tensor.datatype, tensor.data)
            entry["parameters"] = {BINARY_DATA_SIZE: len(blob)}
            blobs.append(blob)
        else:
            entry["data"] = _json_values(tensor)
        entries.append(entry)
    header = {
        "id": "",
        "inputs": entries,
        "outputs": [
            {"name": name, "parameters": {BINARY_DATA: binary_outputs}} for name in outputs
        ],
    }
    header_bytes = orjson.dumps(header)
    if not blobs:
        return header_bytes, None
    return b"".join([header_bytes, *blobs]), len(header_bytes)


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
