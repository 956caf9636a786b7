"""Binary tensor data (Triton's binary tensor data extension): row-major and little-endian;
a BYTES tensor is, per element, a 4-byte little-endian length followed by the element's bytes.

Parsed BYTES tensors are object arrays of `bytes`.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from protocol.datatypes import WIRE_DTYPES
from protocol.errors import ProtocolError

_U32 = struct.Struct("<I")

# The most elements (and the largest dimension) a tensor may have: numpy's index range.
MAX_ELEMENTS = 2**63 - 1


def element_count(shape: Sequence[int], label: str) -> int:
    """The element count of a tensor of `shape` (non-negative sizes); ProtocolError naming
    `label` when a size is negative or the shape could not be held even with a zero size in it
    (numpy refuses such shapes outright)."""
    if any(d < 0 for d in shape):
        raise ProtocolError(f"{label}: shape must hold non-negative sizes, got {list(shape)}")
    nonzero = math.prod(d for d in shape if d)
    if nonzero > MAX_ELEMENTS:
        raise ProtocolError(
            f"{label}: shape {list(shape)} has more elements than a tensor can hold "
            f"(at most 2^63-1)"
        )
    return math.prod(shape)


def tensor_bytes(datatype: str, data: np.ndarray) -> bytes:
    """The binary form of a tensor of wire `datatype` (no copy beyond the result's own when
    `data` is already contiguous and little-endian)."""
    if datatype == "BYTES":
        return serialize_bytes_tensor(data)
    return np.ascontiguousarray(data, dtype=WIRE_DTYPES[datatype]).tobytes()


def serialize_bytes_tensor(array: np.ndarray) -> bytes:
    """BYTES wire format, row-major: per element a 4-byte little-endian length, then the bytes.

    Elements may be bytes, str (UTF-8 encoded) or anything else (its str(), UTF-8 encoded).
    """
    parts: list[bytes] = []
    pack = _U32.pack
    for item in np.asarray(array).reshape(-1).tolist():
        raw = item if type(item) is bytes else _to_bytes(item)
        parts.append(pack(len(raw)))
        parts.append(raw)
    return b"".join(parts)


def deserialize_bytes_tensor(
    buffer: bytes | bytearray | memoryview, count: int, label: str = "BYTES tensor"
) -> np.ndarray:
    """Parse `count` BYTES elements filling `buffer` exactly into a 1-D object array of bytes.

    Raises ProtocolError with `label` in the message when the length prefixes do not fill the
    buffer or the element count differs.
    """
    data = buffer if type(buffer) is bytes else bytes(buffer)
    return parse_bytes_tensor(data, 0, len(data), count, label)


def parse_bytes_tensor(buf: bytes, start: int, size: int, count: int, label: str) -> np.ndarray:
    """The `count` BYTES elements in `buf[start:start + size]` as a 1-D object array; a
    negative `count` takes however many there are."""
    end = start + size
    items: list[bytes] = []
    unpack = _U32.unpack_from
    pos = start
    while pos < end:
        if len(items) == count:
            raise ProtocolError(
                f"{label}: BYTES data holds more than the {count} elements its shape needs"
            )
        if pos + 4 > end:
            raise ProtocolError(f"{label}: truncated length prefix at byte {pos - start} of {size}")
        (length,) = unpack(buf, pos)
        pos += 4
        if pos + length > end:
            raise ProtocolError(
                f"{label}: element {len(items)} of length {length} runs past its {size} bytes"
            )
        items.append(buf[pos : pos + length])
        pos += length
    if len(items) != count:
        if count >= 0:
            raise ProtocolError(
                f"{label}: BYTES data holds {len(items)} elements but its shape needs {count}"
            )
        count = len(items)
    array = np.empty(count, dtype=np.object_)
    array[:] = items
    return array


def split_bytes_elements(buf: bytes, label: str) -> list[bytes]:
    """Every length-prefixed element of `buf`, however many."""
    elements: list[bytes] = parse_bytes_tensor(buf, 0, len(buf), -1, label).tolist()
    return elements


def _to_bytes(item: Any) -> bytes:
    if isinstance(item, (bytes, bytearray, memoryview)):
        return bytes(item)
    return (item if isinstance(item, str) else str(item)).encode()
