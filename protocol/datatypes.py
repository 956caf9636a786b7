"""Tensor datatypes: the wire names (KServe v2), the config enum names (`TYPE_*`) and numpy.

`WIRE_TO_NUMPY` gives the host's native dtypes, what in-memory tensors use; `WIRE_DTYPES` the
little-endian ones, the byte order of binary tensor data on the wire whatever the host's. BYTES
has no fixed-size dtype: its tensors are object arrays of `bytes`.
"""

from __future__ import annotations

import numpy as np

from protocol.errors import ProtocolError

WIRE_TO_NUMPY: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BYTES": np.dtype(np.object_),
}

WIRE_DTYPES: dict[str, np.dtype] = {
    wire: dtype if wire == "BYTES" else dtype.newbyteorder("<")
    for wire, dtype in WIRE_TO_NUMPY.items()
}

# Bytes per element of the fixed-size types (BYTES has none).
ELEMENT_SIZE: dict[str, int] = {k: v.itemsize for k, v in WIRE_TO_NUMPY.items() if k != "BYTES"}

_NUMPY_TO_WIRE: dict[np.dtype, str] = {v: k for k, v in WIRE_TO_NUMPY.items()}


def config_to_wire(config_type_name: str) -> str:
    """`TYPE_FP32` -> `FP32`; `TYPE_STRING` -> `BYTES`."""
    name = config_type_name.removeprefix("TYPE_")
    return "BYTES" if name == "STRING" else name


def wire_to_config(wire: str) -> str:
    """`FP32` -> `TYPE_FP32`; `BYTES` -> `TYPE_STRING`."""
    return "TYPE_STRING" if wire == "BYTES" else f"TYPE_{wire}"


def numpy_dtype(wire: str) -> np.dtype:
    """The native numpy dtype of a wire datatype; ProtocolError when there is none."""
    try:
        return WIRE_TO_NUMPY[wire]
    except KeyError:
        raise ProtocolError(f"unknown datatype '{wire}'") from None


def wire_datatype(dtype: np.dtype) -> str:
    """The wire name for a numpy dtype; unicode and bytes arrays map to BYTES."""
    dtype = np.dtype(dtype)
    if dtype.kind in ("U", "S", "O"):
        return "BYTES"
    try:
        return _NUMPY_TO_WIRE[dtype.newbyteorder("=")]
    except KeyError:
        raise ProtocolError(f"numpy dtype {dtype} has no Triton datatype") from None
