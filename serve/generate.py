"""Triton's generate extension, protocol-neutral: a `generate` JSON body to an inference
request, and each response to the JSON object it is answered with (one for `generate`, one
server-sent event each for `generate_stream`). The mapping is Triton 2.51's, read off it:

- a key that names one of the model's inputs is that input: a string is BYTES (UTF-8), a
  number or boolean of the input's datatype; a scalar or a (nested) list whose element count
  fills the input's shape (the batch dimension 1 for a batching model; one variable
  dimension takes what is left), else "The schema can not convert input '<name>' to tensor
  with proper shape";
- "parameters" (an object) and every other key are request parameters (strings, numbers,
  booleans), the object's first;
- the answer holds each output under its name (one element: the value itself; more: a flat
  list; BYTES as text), with "model_name" and "model_version", keys in sorted order.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from protocol.datatypes import WIRE_TO_NUMPY
from protocol.metadata import TensorMetadata
from serve.errors import ServeError
from serve.inference import InferRequest, InferResponse

ONE_RESPONSE_ONLY = (
    "generate expects model to produce exactly 1 response, use generate stream for model that "
    "generates various number of responses"
)


def generate_request(
    model: str, version: str, inputs: Sequence[TensorMetadata], body: bytes
) -> InferRequest:
    """The inference request a generate body asks for; ServeError (INVALID) naming what is
    wrong. `inputs` is the model's metadata (shapes with the batch dimension as -1)."""
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ServeError.invalid(f"failed to parse the request JSON buffer: {exc}") from None
    if not isinstance(document, dict):
        raise ServeError.invalid("the generate request must be a JSON object")
    by_name = {tensor.name: tensor for tensor in inputs}
    tensors: dict[str, np.ndarray] = {}
    datatypes: dict[str, str] = {}
    given = document.pop("parameters", {})
    if not isinstance(given, dict):
        raise ServeError.invalid("'parameters' must be a JSON object")
    parameters: dict[str, Any] = {key: _parameter(key, value) for key, value in given.items()}
    for key, value in document.items():
        if key in by_name:
            tensors[key] = _tensor(by_name[key], value)
            datatypes[key] = by_name[key].datatype
        else:
            parameters[key] = _parameter(key, value)
    return InferRequest(model, version, tensors, datatypes, parameters=parameters)


def _parameter(key: str, value: Any) -> str | int | float | bool:
    if isinstance(value, (str, int, float, bool)):
        return value
    raise ServeError.invalid(
        f"parameter '{key}' must be a string, a number or a boolean, got {value!r}"
    )


def _tensor(spec: TensorMetadata, value: Any) -> np.ndarray:
    flat = _flatten(value)
    shape = [1 if index == 0 and dim == -1 else dim for index, dim in enumerate(spec.shape)]
    known = math.prod(d for d in shape if d != -1)
    if shape.count(-1) == 1 and known and len(flat) % known == 0:
        shape[shape.index(-1)] = len(flat) // known
    if -1 in shape or math.prod(shape) != len(flat):
        raise _shape_error(spec.name)
    if spec.datatype == "BYTES":
        if not all(isinstance(item, str) for item in flat):
            raise ServeError.invalid(f"input '{spec.name}' is BYTES: give text")
        array = np.array([item.encode() for item in flat], dtype=object)
    else:
        if any(isinstance(item, str) for item in flat):
            raise ServeError.invalid(f"input '{spec.name}' is {spec.datatype}: give numbers")
        try:
            array = np.array(flat, dtype=WIRE_TO_NUMPY[spec.datatype])
        except (KeyError, ValueError, OverflowError):
            raise _shape_error(spec.name) from None
    return array.reshape(shape)


def _shape_error(name: str) -> ServeError:
    return ServeError.invalid(
        f"The schema can not convert input '{name}' to tensor with proper shape"
    )


def _flatten(value: Any) -> list[Any]:
    if isinstance(value, list):
        return [item for element in value for item in _flatten(element)]
    if isinstance(value, (str, int, float, bool)):
        return [value]
    raise ServeError.invalid(f"a generate input must be text, numbers or booleans, got {value!r}")


def generate_answer(response: InferResponse) -> bytes:
    """The JSON object a response is answered with."""
    document: dict[str, Any] = {
        "model_name": response.model_name,
        "model_version": response.model_version,
    }
    for output in response.outputs:
        values = [
            item.decode("utf-8", "replace") if isinstance(item, bytes) else item
            for item in output.data.reshape(-1).tolist()
        ]
        document[output.name] = values[0] if len(values) == 1 else values
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def generate_error(message: str) -> bytes:
    """The JSON body an error is answered with on the generate routes: `{"error": message}`, as
    Triton writes it."""
    return json.dumps({"error": message}).encode()
