"""Data types and BYTES framing of Triton's python backend API: the TRITONSERVER_DataType
numbers, their numpy types, and the length-prefixed BYTES encoding (the same bytes as the
binary tensor extension's)."""

from __future__ import annotations

from typing import Any

import numpy as np

from protocol.datatypes import WIRE_TO_NUMPY, wire_to_config
from protocol.errors import ProtocolError
from protocol.tensors import serialize_bytes_tensor, split_bytes_elements
from serve.backends.python.pb_errors import TritonModelException

# TRITONSERVER_DataType numbers, as Tensor.triton_dtype() reports them.
TRITONSERVER_TYPES: dict[str, int] = {
    "BOOL": 1,
    "UINT8": 2,
    "UINT16": 3,
    "UINT32": 4,
    "UINT64": 5,
    "INT8": 6,
    "INT16": 7,
    "INT32": 8,
    "INT64": 9,
    "FP16": 10,
    "FP32": 11,
    "FP64": 12,
    "BYTES": 13,
    "BF16": 14,
}

# A model config's TYPE_* names -> numpy types, as Triton's module defines them (TYPE_BOOL is
# Python's bool; TYPE_BF16 has no numpy type): the protocol's table, read the module's way.
TRITON_STRING_TO_NUMPY: dict[str, type] = {
    wire_to_config(wire): bool if wire == "BOOL" else dtype.type
    for wire, dtype in WIRE_TO_NUMPY.items()
}

_NUMBER_TO_NUMPY: dict[int, type] = {
    TRITONSERVER_TYPES[wire]: dtype.type for wire, dtype in WIRE_TO_NUMPY.items()
}
_NUMPY_TO_NUMBER: dict[np.dtype, int] = {np.dtype(t): n for n, t in _NUMBER_TO_NUMPY.items()}


def triton_to_numpy_type(data_type: int) -> type | None:
    """A TRITONSERVER_DataType number -> its numpy type; None when there is none (BF16)."""
    return _NUMBER_TO_NUMPY.get(data_type)


def numpy_to_triton_type(data_type: Any) -> int | None:
    """A numpy type or dtype -> its TRITONSERVER_DataType number (np.bytes_ and str arrays are
    BYTES); None when Triton has no such type."""
    try:
        dtype = np.dtype(data_type)
    except TypeError:
        return None
    if dtype.kind in "SU":
        return TRITONSERVER_TYPES["BYTES"]
    return _NUMPY_TO_NUMBER.get(dtype.newbyteorder("="))


def triton_string_to_numpy(triton_type_string: str) -> type:
    """`"TYPE_FP32"` -> `numpy.float32`; an unknown name raises KeyError, as in Triton."""
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def serialize_byte_tensor(input_tensor: np.ndarray) -> bytes | None:
    """A BYTES tensor (object or np.bytes_ array) as Triton frames it: per element, row-major,
    its length as 4 little-endian bytes and then its bytes (str items UTF-8 encoded, other
    objects their str()). An empty tensor gives b""; a tensor of another dtype gives None."""
    if input_tensor.size == 0:
        return b""
    if input_tensor.dtype == np.object_ or input_tensor.dtype.type == np.bytes_:
        return serialize_bytes_tensor(input_tensor)
    return None


def deserialize_bytes_tensor(encoded_tensor: bytes | bytearray | memoryview) -> np.ndarray:
    """Bytes framed as `serialize_byte_tensor` frames them -> a 1-D object array of bytes."""
    try:
        elements = split_bytes_elements(bytes(encoded_tensor), "deserialize_bytes_tensor")
    except ProtocolError as exc:
        raise TritonModelException(str(exc)) from None
    array = np.empty(len(elements), dtype=np.object_)
    array[:] = elements
    return array
