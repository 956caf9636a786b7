"""Tensor datatypes as the analyzer checks them: the protocol's little-endian table, with an
AnalyzerError naming the tensor for a datatype it lacks."""

from __future__ import annotations

import numpy as np

from analyzer.errors import AnalyzerError
from protocol.datatypes import WIRE_DTYPES


def numpy_dtype(datatype: str, tensor: str) -> np.dtype:
    """The numpy dtype of a wire datatype; an AnalyzerError naming the tensor if unknown."""
    try:
        return WIRE_DTYPES[datatype]
    except KeyError:
        raise AnalyzerError(
            f"tensor '{tensor}' has datatype '{datatype}', which this analyzer does not support"
        ) from None
