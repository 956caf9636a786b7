"""KServe v2 tensor datatypes as numpy dtypes (the analyzer's own table: it never imports serve)."""

from __future__ import annotations

import numpy as np

from analyzer.errors import AnalyzerError

# Wire name -> little-endian numpy dtype, the byte order of the binary tensor extension.
# BYTES has no fixed-size dtype: its tensors are object arrays of `bytes`.
WIRE_DTYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype("<u1"),
    "UINT16": np.dtype("<u2"),
    "UINT32": np.dtype("<u4"),
    "UINT64": np.dtype("<u8"),
    "INT8": np.dtype("<i1"),
    "INT16": np.dtype("<i2"),
    "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"),
    "FP16": np.dtype("<f2"),
    "FP32": np.dtype("<f4"),
    "FP64": np.dtype("<f8"),
    "BYTES": np.dtype(np.object_),
}


def numpy_dtype(datatype: str, tensor: str) -> np.dtype:
    """The numpy dtype of a wire datatype; an AnalyzerError naming the tensor if unknown."""
    try:
        return WIRE_DTYPES[datatype]
    except KeyError:
        raise AnalyzerError(
            f"tensor '{tensor}' has datatype '{datatype}', which this analyzer does not support"
        ) from None
