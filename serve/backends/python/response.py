"""Errors and responses between the server's terms and pb_utils' terms."""

from __future__ import annotations

import json

import numpy as np

from serve.backends.python.protocol import ResponseMsg, TensorMeta
from serve.errors import ErrorKind, ServeError
from serve.inference import InferResponse

# pb_utils.TritonError codes -> error kinds; the other codes are internal errors.
ERROR_KINDS = {
    2: ErrorKind.NOT_FOUND,
    3: ErrorKind.INVALID_ARGUMENT,
    4: ErrorKind.UNAVAILABLE,
    5: ErrorKind.UNSUPPORTED,
    6: ErrorKind.ALREADY_EXISTS,
    7: ErrorKind.CANCELLED,
}
_INTERNAL = 1  # pb_utils.TritonError.INTERNAL
_ERROR_CODES = {kind: code for code, kind in ERROR_KINDS.items()}


def error_message(error: ServeError) -> ResponseMsg:
    """`error` as a response a model reads as `InferenceResponse.error()`."""
    return ResponseMsg([], error.message, _ERROR_CODES.get(error.kind, _INTERNAL))


def inline_response(response: InferResponse) -> ResponseMsg:
    """A called model's response with its tensors carried in the message."""
    metas = []
    for output in response.outputs:
        data = output.data
        dtype = "|O" if data.dtype.kind == "O" else data.dtype.str
        metas.append(TensorMeta(output.name, dtype, data.shape, -1, np.ascontiguousarray(data)))
    parameters = json.dumps(response.parameters) if response.parameters else ""
    return ResponseMsg(metas, parameters=parameters)
