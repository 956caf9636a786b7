"""KServe v2 REST infer codec with Triton's binary tensor data extension.

A request or response body is a JSON header, optionally followed by binary tensor data; the
`Inference-Header-Content-Length` HTTP header then gives the JSON header's length. Binary tensors
carry `parameters.binary_data_size` and follow the header in tensor order, little-endian and
row-major; a BYTES element is a 4-byte little-endian length followed by its bytes.

Decoded fixed-size tensors are `numpy.frombuffer` views of the body (bytes, or the buffer a
large body was read into: no copy either way): read-only and possibly unaligned. BYTES tensors
are object arrays of `bytes`. A response's binary outputs are not joined to its JSON header:
`encode_infer_response_parts` gives the header and each output's bytes as separate buffers.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson

from protocol.datatypes import ELEMENT_SIZE, WIRE_DTYPES, WIRE_TO_NUMPY
from protocol.errors import ProtocolError
from protocol.headers import (
    BINARY_DATA,
    BINARY_DATA_OUTPUT,
    BINARY_DATA_SIZE,
    HEADER_LENGTH,
    SHARED_MEMORY_REGION,
)
from protocol.tensors import element_count, parse_bytes_tensor, serialize_bytes_tensor
from serve.errors import ServeError
from serve.inference import (
    InferRequest,
    InferResponse,
    OutputTensor,
    RegionSlice,
    RequestedOutput,
)
from serve.shared_memory.tensors import output_region, region_slice

_JSON_OPTIONS = orjson.OPT_SERIALIZE_NUMPY

# numpy kinds that JSON `data` may infer to for each datatype (bool is never a number here).
_JSON_KINDS: dict[str, str] = {
    wire: "b" if wire == "BOOL" else "iuf" if dtype.kind == "f" else "iu"
    for wire, dtype in WIRE_TO_NUMPY.items()
    if wire != "BYTES"
}
_KIND_NAMES = {
    "b": "booleans",
    "i": "integers",
    "u": "integers",
    "f": "floating-point numbers",
    "U": "strings",
}
# A length longer than this many digits is no length a body could have (and int() refuses
# strings of more than 4,300 digits).
_MAX_LENGTH_DIGITS = 19
_FLOAT_MAX = {"FP16": float(np.finfo(np.float16).max), "FP32": float(np.finfo(np.float32).max)}


def parse_header_length(value: str | bytes | None) -> int | None:
    """The `Inference-Header-Content-Length` header as an int; None when absent."""
    if value is None:
        return None
    if not (value.isascii() and value.isdigit()) or len(value) > _MAX_LENGTH_DIGITS:
        shown = value[:40].decode("latin-1") if isinstance(value, bytes) else value[:40]
        raise ServeError.invalid(
            f"{HEADER_LENGTH} must be a non-negative integer of at most {_MAX_LENGTH_DIGITS} "
            f"digits, got {shown!r}{'...' if len(value) > 40 else ''}"
        )
    return int(value)


def decode_infer_request(
    body: bytes | memoryview, header_length: int | None, model_name: str, model_version: str
) -> InferRequest:
    """Decode an infer request body (bytes, or a byte buffer such as a memoryview: its binary
    tensors are views of it); `header_length` is None when the whole body is JSON."""
    if type(body) is not bytes:
        body = memoryview(body).cast("B")
    body_length = len(body)
    json_end = _json_end(header_length, body_length)
    header_bytes = body if json_end == body_length else body[:json_end]
    if type(header_bytes) is not bytes:
        header_bytes = bytes(header_bytes)  # the JSON header only
    try:
        header = orjson.loads(header_bytes)
    except orjson.JSONDecodeError as exc:
        raise ServeError.invalid(f"malformed JSON in the inference request: {exc}") from None
    if type(header) is not dict:
        raise ServeError.invalid("the inference request must be a JSON object")

    raw_inputs = header.get("inputs")
    if type(raw_inputs) is not list:
        raise ServeError.invalid("the inference request needs an 'inputs' list")
    inputs: dict[str, np.ndarray] = {}
    region_inputs: dict[str, tuple[tuple[int, ...], RegionSlice]] = {}
    datatypes: dict[str, str] = {}
    offset = json_end
    # numpy reads [true, 1] as integers: JSON data is searched for booleans only when the
    # header holds a JSON literal true or false at all
    literals = b"true" in header_bytes or b"false" in header_bytes
    for index, spec in enumerate(raw_inputs):
        name, datatype, array, offset = _decode_input(spec, index, body, offset, literals)
        if name in datatypes:
            raise ServeError.invalid(f"input '{name}' appears more than once")
        if isinstance(array, tuple):
            region_inputs[name] = array
        else:
            inputs[name] = array
        datatypes[name] = datatype
    if offset != body_length:
        raise ServeError.invalid(
            f"{body_length - offset} bytes of binary data follow the last binary input"
            " (binary_data_size values do not add up to the body)"
        )

    request_id = header.get("id", "")
    if type(request_id) is not str:
        raise ServeError.invalid("'id' must be a string")
    parameters = header.get("parameters")
    if parameters is None:
        parameters = {}
    elif type(parameters) is not dict:
        raise ServeError.invalid("request 'parameters' must be a JSON object")
    return InferRequest(
        model_name=model_name,
        model_version=model_version,
        inputs=inputs,
        input_datatypes=datatypes,
        requested_outputs=_requested_outputs(header.get("outputs")),
        id=request_id,
        parameters=parameters,
        region_inputs=region_inputs,
    )


def encode_infer_response(
    response: InferResponse, request: InferRequest
) -> tuple[bytes, int | None]:
    """Encode a response as (body, header_length): `encode_infer_response_parts` joined."""
    parts, header_length = encode_infer_response_parts(response, request)
    return b"".join(parts), header_length


def encode_infer_response_parts(
    response: InferResponse, request: InferRequest
) -> tuple[list[bytes | memoryview], int | None]:
    """Encode a response as (body buffers, header_length): the JSON header, then each binary
    output's bytes (a view of its array when that is already little-endian and contiguous);
    header_length is None for an all-JSON body.

    An output goes binary when its requested output says `binary_data: true`, or, without
    that parameter, when the request says `binary_data_output: true`. A BYTES output asked
    for as JSON whose elements are not all valid UTF-8 goes binary instead: JSON strings cannot
    carry it losslessly, and Triton's clients read either form.
    """
    binary_default = request.parameters.get(BINARY_DATA_OUTPUT) is True
    per_output: dict[str, Any] = {}
    if request.requested_outputs:
        per_output = {o.name: o.parameters.get(BINARY_DATA) for o in request.requested_outputs}

    outputs: list[dict[str, Any]] = []
    blobs: list[bytes | memoryview] = []
    for output in response.outputs:
        choice = per_output.get(output.name)
        entry, blob = _encode_output(output, binary_default if choice is None else choice is True)
        outputs.append(entry)
        if blob is not None:
            blobs.append(blob)

    header: dict[str, Any] = {
        "model_name": response.model_name,
        "model_version": response.model_version,
    }
    # Triton echoes only a non-empty id.
    request_id = response.id or request.id
    if request_id:
        header["id"] = request_id
    if response.parameters:
        header["parameters"] = response.parameters
    header["outputs"] = outputs
    header_bytes = orjson.dumps(header, option=_JSON_OPTIONS)
    if not blobs:
        return [header_bytes], None
    return [header_bytes, *blobs], len(header_bytes)


def encode_error(message: str) -> bytes:
    """The body of every HTTP error answer: `{"error": message}`, as Triton writes it."""
    return orjson.dumps({"error": message})


def _json_end(header_length: int | None, body_length: int) -> int:
    if header_length is None:
        return body_length
    if type(header_length) is not int or header_length < 0:
        raise ServeError.invalid(
            f"{HEADER_LENGTH} must be a non-negative integer, got {header_length!r}"
        )
    if header_length > body_length:
        raise ServeError.invalid(
            f"{HEADER_LENGTH} {header_length} exceeds body length {body_length}"
        )
    return header_length


def _decode_input(
    spec: Any, index: int, body: bytes | memoryview, offset: int, literals: bool
) -> tuple[str, str, np.ndarray | tuple[tuple[int, ...], RegionSlice], int]:
    """One input: (name, datatype, array or (shape, shared-memory range), offset of the next
    binary input)."""
    if type(spec) is not dict:
        raise ServeError.invalid(f"inputs[{index}] must be a JSON object")
    name = spec.get("name")
    if type(name) is not str:
        raise ServeError.invalid(f"inputs[{index}] needs a 'name' string")
    datatype = spec.get("datatype")
    if type(datatype) is not str:
        raise ServeError.invalid(f"input '{name}' needs a 'datatype' string")
    if datatype not in WIRE_TO_NUMPY:
        raise ServeError.invalid(f"input '{name}': unknown datatype '{datatype}'")
    shape = spec.get("shape")
    if type(shape) is not list or not all(type(d) is int and d >= 0 for d in shape):
        raise ServeError.invalid(
            f"input '{name}': 'shape' must be a list of non-negative integers, got {shape!r}"
        )
    try:
        count = element_count(shape, f"input '{name}'")
    except ProtocolError as exc:
        raise ServeError.invalid(str(exc)) from None

    params = spec.get("parameters")
    if params is not None and type(params) is not dict:
        raise ServeError.invalid(f"input '{name}': 'parameters' must be a JSON object")
    size = params.get(BINARY_DATA_SIZE) if params else None
    data = spec.get("data")
    where = region_slice(params, f"input '{name}'") if params else None
    if where is not None:
        if data is not None or size is not None:
            raise ServeError.invalid(
                f"input '{name}' must set only one of 'data', 'binary_data_size' and"
                f" '{SHARED_MEMORY_REGION}'"
            )
        return name, datatype, (tuple(shape), where), offset
    if size is None:
        if data is None:
            raise ServeError.invalid(
                f"input '{name}' has neither 'data' nor parameters.binary_data_size"
            )
        array = _json_tensor(data, name, datatype, shape, count, literals)
        return name, datatype, array, offset

    if data is not None:
        raise ServeError.invalid(f"input '{name}' has both 'data' and binary_data_size")
    if type(size) is not int or size < 0:
        raise ServeError.invalid(
            f"input '{name}': binary_data_size must be a non-negative integer, got {size!r}"
        )
    if datatype != "BYTES" and size != count * ELEMENT_SIZE[datatype]:
        raise ServeError.invalid(
            f"input '{name}': binary_data_size {size} does not match shape {shape} of {datatype}"
            f" ({count * ELEMENT_SIZE[datatype]} bytes)"
        )
    end = offset + size
    if end > len(body):
        raise ServeError.invalid(
            f"input '{name}': binary_data_size {size} runs past the end of the body"
            f" ({len(body) - offset} bytes left)"
        )
    if datatype == "BYTES":
        data_bytes, start = (body, offset) if type(body) is bytes else (bytes(body[offset:end]), 0)
        try:
            items = parse_bytes_tensor(data_bytes, start, size, count, f"input '{name}'")
        except ProtocolError as exc:
            raise ServeError.invalid(str(exc)) from None
        array = items.reshape(shape)
    else:
        array = np.frombuffer(body, WIRE_DTYPES[datatype], count, offset).reshape(shape)
        if type(body) is not bytes:
            array.flags.writeable = False  # a view of a writable buffer: read-only as from bytes
    return name, datatype, array, end


def _json_tensor(
    data: Any, name: str, datatype: str, shape: list[int], count: int, literals: bool
) -> np.ndarray:
    """`data` as an array of `datatype`; `literals`: the request holds a JSON true or false
    somewhere, so numeric data is checked for booleans."""
    if type(data) is not list:
        raise ServeError.invalid(f"input '{name}': 'data' must be a list")
    if datatype == "BYTES":
        return _json_bytes(data, name, count).reshape(shape)
    try:
        raw = np.array(data)
    except (ValueError, TypeError, OverflowError):
        raise ServeError.invalid(
            f"input '{name}': 'data' must be a flat or evenly nested list of {datatype} values"
        ) from None
    if raw.size != count:
        raise ServeError.invalid(
            f"input '{name}': 'data' has {raw.size} elements but shape {shape} needs {count}"
        )
    dtype = WIRE_TO_NUMPY[datatype]
    if count == 0:
        return np.zeros(shape, dtype)
    kind = raw.dtype.kind
    if kind not in _JSON_KINDS[datatype]:
        if dtype.kind in "iu" and kind in "fO":
            # numpy infers float64 or object for ints beyond int64 (UINT64): check them exactly.
            return _exact_ints(data, name, datatype, shape)
        found = _KIND_NAMES.get(kind, "mixed or non-scalar values")
        raise ServeError.invalid(f"input '{name}': 'data' holds {found}, not {datatype} values")
    if literals and datatype != "BOOL" and _holds_booleans(data, raw.ndim):
        raise ServeError.invalid(f"input '{name}': 'data' holds booleans, not {datatype} values")
    if dtype.kind in "iu" and raw.dtype != dtype:
        info = np.iinfo(dtype)
        out_of_range = int(raw.min()) < info.min or int(raw.max()) > info.max
    else:
        out_of_range = datatype in _FLOAT_MAX and float(np.abs(raw).max()) > _FLOAT_MAX[datatype]
    if out_of_range:
        raise ServeError.invalid(f"input '{name}': 'data' values out of range for {datatype}")
    return raw.astype(dtype, copy=False).reshape(shape)


def _holds_booleans(data: list[Any], ndim: int) -> bool:
    flat = data if ndim == 1 else np.array(data, dtype=np.object_).reshape(-1).tolist()
    return any(type(v) is bool for v in flat)


def _exact_ints(data: list[Any], name: str, datatype: str, shape: list[int]) -> np.ndarray:
    flat = np.array(data, dtype=np.object_).reshape(-1).tolist()
    if not all(type(v) is int for v in flat):
        raise ServeError.invalid(
            f"input '{name}': 'data' holds non-integers, not {datatype} values"
        )
    dtype = WIRE_TO_NUMPY[datatype]
    info = np.iinfo(dtype)
    if min(flat) < info.min or max(flat) > info.max:
        raise ServeError.invalid(f"input '{name}': 'data' values out of range for {datatype}")
    return np.array(flat, dtype=dtype).reshape(shape)


def _json_bytes(data: list[Any], name: str, count: int) -> np.ndarray:
    try:
        items = [s.encode() for s in data]
    except AttributeError:  # nested lists or non-strings
        items = _nested_strings(data, name)
    if len(items) != count:
        raise ServeError.invalid(
            f"input '{name}': 'data' has {len(items)} elements but its shape needs {count}"
        )
    array = np.empty(count, dtype=np.object_)
    array[:] = items
    return array


def _nested_strings(data: list[Any], name: str) -> list[bytes]:
    try:
        flat: list[Any] | None = np.array(data, dtype=np.object_).reshape(-1).tolist()
    except ValueError:  # ragged nesting
        flat = None
    if flat is None or not all(type(s) is str for s in flat):
        raise ServeError.invalid(
            f"input '{name}': BYTES 'data' must be a flat or evenly nested list of strings"
        )
    return [s.encode() for s in flat]


def _requested_outputs(raw: Any) -> list[RequestedOutput] | None:
    if raw is None:
        return None
    if type(raw) is not list:
        raise ServeError.invalid("'outputs' must be a list")
    result: list[RequestedOutput] = []
    seen: set[str] = set()
    for index, spec in enumerate(raw):
        name = spec.get("name") if type(spec) is dict else None
        if type(name) is not str:
            raise ServeError.invalid(f"outputs[{index}] needs a 'name' string")
        if name in seen:
            raise ServeError.invalid(f"output '{name}' is requested more than once")
        seen.add(name)
        params = spec.get("parameters")
        if params is None:
            params = {}
        elif type(params) is not dict:
            raise ServeError.invalid(f"output '{name}': 'parameters' must be a JSON object")
        result.append(RequestedOutput(name, params, output_region(params, name)))
    return result


def _encode_output(
    output: OutputTensor, binary: bool
) -> tuple[dict[str, Any], bytes | memoryview | None]:
    """The output's JSON entry and its binary blob (None when its data is in the JSON or in
    shared memory)."""
    data = output.data
    entry: dict[str, Any] = {
        "name": output.name,
        "datatype": output.datatype,
        "shape": data.shape,
    }
    if output.region is not None:
        # No parameters, as Triton: its C++ client reads binary_data_size from any it finds.
        return entry, None
    blob: bytes | memoryview
    if output.datatype == "BYTES":
        if not binary:
            texts = _as_texts(data)
            if texts is not None:
                entry["data"] = texts
                return entry, None
        blob = serialize_bytes_tensor(data)
        size = len(blob)
    else:
        array = _wire_array(output)
        if not binary:
            # orjson serializes float16 arrays only from 3.9 on; float32 holds them exactly.
            flat = array.reshape(-1)
            entry["data"] = flat.astype(np.float32) if output.datatype == "FP16" else flat
            return entry, None
        raw: Any = array.reshape(-1).view(np.uint8)
        blob = memoryview(raw)
        size = len(blob)
    entry["parameters"] = {BINARY_DATA_SIZE: size}
    return entry, blob


def _wire_array(output: OutputTensor) -> np.ndarray:
    dtype = WIRE_DTYPES.get(output.datatype)
    if dtype is None:
        raise ServeError.internal(f"output '{output.name}': unknown datatype '{output.datatype}'")
    data = output.data
    if data.dtype != dtype:
        data = data.astype(dtype)
    if not data.flags.c_contiguous:
        data = np.ascontiguousarray(data)
    return data


def _as_texts(data: np.ndarray) -> list[str] | None:
    """The elements as str for JSON; None when a bytes element is not valid UTF-8."""
    items = data.reshape(-1).tolist()
    try:
        return [b.decode() for b in items]
    except UnicodeDecodeError:
        return None
    except AttributeError:  # not all bytes: str or other objects
        pass
    texts: list[str] = []
    for item in items:
        if isinstance(item, bytes):
            try:
                texts.append(item.decode())
            except UnicodeDecodeError:
                return None
        else:
            texts.append(item if isinstance(item, str) else str(item))
    return texts
