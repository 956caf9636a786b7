"""KServe v2 REST infer request bodies, with Triton's binary tensor data extension.

A body is a JSON header optionally followed by the binary tensors in input order; the
`Inference-Header-Content-Length` HTTP header then gives the JSON header's length. Requests
look like perf_analyzer's: `"id": ""` and every model output requested, in binary by default.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import numpy as np
import orjson

from analyzer.errors import AnalyzerError
from analyzer.inputs import InputTensor

_U32 = struct.Struct("<I")


def encode_infer_body(
    inputs: Sequence[InputTensor],
    outputs: Sequence[str],
    binary_inputs: bool = True,
    binary_outputs: bool = True,
) -> tuple[bytes, int | None]:
    """(body, JSON header length); the length is None when the whole body is JSON."""
    entries: list[dict[str, Any]] = []
    blobs: list[bytes] = []
    for tensor in inputs:
        entry: dict[str, Any] = {
            "name": tensor.name,
            "shape": list(tensor.shape),
            "datatype": tensor.datatype,
        }
        if binary_inputs:
            blob = tensor_bytes(tensor)
            entry["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            entry["data"] = _json_values(tensor)
        entries.append(entry)
    header = {
        "id": "",
        "inputs": entries,
        "outputs": [
            {"name": name, "parameters": {"binary_data": binary_outputs}} for name in outputs
        ],
    }
    header_bytes = orjson.dumps(header)
    if not blobs:
        return header_bytes, None
    return b"".join([header_bytes, *blobs]), len(header_bytes)


def tensor_bytes(tensor: InputTensor) -> bytes:
    """The tensor's binary form: little-endian row-major; BYTES as 4-byte-length-prefixed."""
    if tensor.datatype == "BYTES":
        parts: list[bytes] = []
        for element in tensor.data.reshape(-1):
            parts.append(_U32.pack(len(element)))
            parts.append(element)
        return b"".join(parts)
    return np.ascontiguousarray(tensor.data).tobytes()


def _json_values(tensor: InputTensor) -> list[Any]:
    flat = tensor.data.reshape(-1)
    if tensor.datatype != "BYTES":
        return flat.tolist()
    try:
        return [element.decode() for element in flat]
    except UnicodeDecodeError:
        raise AnalyzerError(
            f"input '{tensor.name}' holds bytes that are not UTF-8 text, which JSON cannot"
            " carry: use --input-tensor-format binary"
        ) from None
