"""ModelInferRequest / ModelInferResponse (Triton's gRPC protocol) <-> InferRequest / InferResponse.

An input's data comes either in the request's `raw_input_contents` (one entry per input that
has neither typed contents nor a shared-memory region, in input order: the little-endian,
row-major bytes; BYTES as 4-byte length-prefixed elements) or in the input's typed `contents`
field for its datatype (FP16 and BF16 have none: raw only). The two forms are not mixed in one
request. Raw tensors are `numpy.frombuffer` views of the received bytes (or of the buffer the
message was gathered into, when `serve.grpc.raw_contents` took the entries out): read-only.

Responses carry every output in `raw_output_contents`, in output order.
`encode_infer_response_wire` gives a response's wire bytes as buffers: the message without its
raw outputs, then each raw output's field as its array's own bytes (no copy into the message).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from tritonclient.grpc import service_pb2 as pb

from protocol.datatypes import ELEMENT_SIZE, WIRE_DTYPES, WIRE_TO_NUMPY
from protocol.errors import ProtocolError
from protocol.tensors import element_count, parse_bytes_tensor, tensor_bytes
from serve.errors import ServeError
from serve.inference import InferRequest, InferResponse, RegionSlice, RequestedOutput
from serve.shared_memory.tensors import output_region, region_slice

# The InferTensorContents field that carries each datatype, and the numpy type it holds there.
CONTENTS_FIELDS: dict[str, tuple[str, np.dtype]] = {
    "BOOL": ("bool_contents", np.dtype(np.bool_)),
    "INT8": ("int_contents", np.dtype(np.int32)),
    "INT16": ("int_contents", np.dtype(np.int32)),
    "INT32": ("int_contents", np.dtype(np.int32)),
    "INT64": ("int64_contents", np.dtype(np.int64)),
    "UINT8": ("uint_contents", np.dtype(np.uint32)),
    "UINT16": ("uint_contents", np.dtype(np.uint32)),
    "UINT32": ("uint_contents", np.dtype(np.uint32)),
    "UINT64": ("uint64_contents", np.dtype(np.uint64)),
    "FP32": ("fp32_contents", np.dtype(np.float32)),
    "FP64": ("fp64_contents", np.dtype(np.float64)),
    "BYTES": ("bytes_contents", np.dtype(np.object_)),
}

_INT64_MAX = 2**63 - 1

ParameterMap = Mapping[str, Any]  # protobuf map<string, InferParameter>


def decode_infer_request(
    message: pb.ModelInferRequest, raw: Sequence[bytes | memoryview] | None = None
) -> InferRequest:
    """The request as an InferRequest; ServeError (invalid) naming the tensor when it is wrong.
    `raw`: the raw_input_contents entries when they were taken out of `message`."""
    raw_contents: Sequence[bytes | memoryview] = message.raw_input_contents if raw is None else raw
    inputs: dict[str, np.ndarray] = {}
    region_inputs: dict[str, tuple[tuple[int, ...], RegionSlice]] = {}
    datatypes: dict[str, str] = {}
    raw_used = 0
    for tensor in message.inputs:
        name = tensor.name
        if name in datatypes:
            raise ServeError.invalid(f"input '{name}' appears more than once")
        datatype, shape = _datatype_and_shape(tensor)
        where = region_slice(decode_parameters(tensor.parameters), f"input '{name}'")
        if where is not None:  # the DataPlane reads it from the region
            if tensor.HasField("contents"):
                raise ServeError.invalid(
                    f"input '{name}': 'contents' must not be given with a shared-memory region"
                )
            region_inputs[name] = (tuple(shape), where)
            datatypes[name] = datatype
            continue
        if tensor.HasField("contents"):
            if raw_contents:
                raise ServeError.invalid(
                    f"input '{name}': 'contents' must not be given when the request uses "
                    "raw_input_contents"
                )
            array = contents_input(name, datatype, shape, tensor.contents)
        elif raw_used < len(raw_contents):
            array = raw_input(name, datatype, shape, raw_contents[raw_used])
            raw_used += 1
        elif math.prod(shape) == 0:
            array = np.empty(shape, WIRE_TO_NUMPY[datatype])
        else:
            raise ServeError.invalid(
                f"input '{name}' has no data: neither 'contents', a raw_input_contents entry "
                f"(the request has {len(raw_contents)}) nor a shared-memory region"
            )
        inputs[name] = array
        datatypes[name] = datatype
    if raw_used != len(raw_contents):
        raise ServeError.invalid(
            f"the request has {len(raw_contents)} raw_input_contents entries but "
            f"{raw_used} inputs that take their data from them"
        )
    return InferRequest(
        model_name=message.model_name,
        model_version=message.model_version,
        inputs=inputs,
        input_datatypes=datatypes,
        requested_outputs=requested_outputs(message.outputs),
        id=message.id,
        parameters=decode_parameters(message.parameters),
        region_inputs=region_inputs,
    )


def encode_infer_response(response: InferResponse, request: InferRequest) -> pb.ModelInferResponse:
    """`response` as a ModelInferResponse, every output in raw_output_contents (an empty entry for
    one written to a shared-memory region); the id is the request's when the response has none."""
    message = pb.ModelInferResponse(
        model_name=response.model_name,
        model_version=response.model_version,
        id=response.id or request.id,
    )
    raw: list[bytes] = []
    for output in response.outputs:
        data = output.data
        message.outputs.add(name=output.name, datatype=output.datatype, shape=data.shape)
        if output.region is not None:  # written there; an empty entry keeps the order (Triton)
            raw.append(b"")
            continue
        try:
            raw.append(tensor_bytes(output.datatype, data))
        except KeyError:
            raise ServeError.internal(
                f"output '{output.name}': unknown datatype '{output.datatype}'"
            ) from None
    message.raw_output_contents.extend(raw)
    if response.parameters:
        encode_parameters(response.parameters, message.parameters)
    return message


_RAW_OUTPUT_TAG = bytes([6 << 3 | 2])  # ModelInferResponse.raw_output_contents


def raw_output_bytes(response: InferResponse) -> int:
    """About how many bytes the response's raw_output_contents carry (its arrays' sizes; a
    BYTES output's, and one written to a shared-memory region, count as their arrays')."""
    return sum(output.data.nbytes for output in response.outputs)


def encode_infer_response_wire(
    response: InferResponse, request: InferRequest
) -> list[bytes | memoryview]:
    """The serialized ModelInferResponse as buffers, in order: what `encode_infer_response`
    gives, serialized, with each output's bytes a view of its array when that is already
    little-endian and contiguous."""
    message = pb.ModelInferResponse(
        model_name=response.model_name,
        model_version=response.model_version,
        id=response.id or request.id,
    )
    tail: list[bytes | memoryview] = []
    for output in response.outputs:
        data = output.data
        message.outputs.add(name=output.name, datatype=output.datatype, shape=data.shape)
        raw: bytes | memoryview = b""
        if output.region is None:  # else written there; an empty entry keeps the order
            raw = _output_buffer(output.name, output.datatype, data)
        tag = _RAW_OUTPUT_TAG + _varint(len(raw))
        tail += (tag, raw)
    if response.parameters:
        encode_parameters(response.parameters, message.parameters)
    head = message.SerializeToString()
    return [head, *tail]


def _output_buffer(name: str, datatype: str, data: np.ndarray) -> bytes | memoryview:
    if datatype == "BYTES":
        return tensor_bytes(datatype, data)
    dtype = WIRE_DTYPES.get(datatype)
    if dtype is None:
        raise ServeError.internal(f"output '{name}': unknown datatype '{datatype}'")
    flat: Any = np.ascontiguousarray(data, dtype=dtype).reshape(-1).view(np.uint8)
    return memoryview(flat)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _datatype_and_shape(tensor: pb.ModelInferRequest.InferInputTensor) -> tuple[str, list[int]]:
    datatype = tensor.datatype
    if datatype not in WIRE_TO_NUMPY:
        raise ServeError.invalid(f"input '{tensor.name}': unknown datatype '{datatype}'")
    shape = list(tensor.shape)
    try:
        element_count(shape, f"input '{tensor.name}'")
    except ProtocolError as exc:
        raise ServeError.invalid(str(exc)) from None
    return datatype, shape


def raw_input(name: str, datatype: str, shape: list[int], raw: bytes | memoryview) -> np.ndarray:
    """An input from its raw_input_contents entry (a read-only view of `raw`, no copy)."""
    count = math.prod(shape)
    if datatype == "BYTES":
        data = raw if isinstance(raw, bytes) else bytes(raw)
        try:
            items = parse_bytes_tensor(data, 0, len(data), count, f"input '{name}'")
        except ProtocolError as exc:
            raise ServeError.invalid(str(exc)) from None
        return items.reshape(shape)
    expected = count * ELEMENT_SIZE[datatype]
    if len(raw) != expected:
        raise ServeError.invalid(
            f"input '{name}': raw_input_contents holds {len(raw)} bytes but shape {shape} of "
            f"{datatype} needs {expected}"
        )
    array = np.frombuffer(raw, WIRE_DTYPES[datatype], count).reshape(shape)
    if type(raw) is not bytes:
        array.flags.writeable = False  # a view of a writable buffer: read-only as from bytes
    return array


def contents_input(
    name: str, datatype: str, shape: list[int], contents: pb.InferTensorContents
) -> np.ndarray:
    """An input from the typed field of `contents` that its datatype uses."""
    field = CONTENTS_FIELDS.get(datatype)
    if field is None:
        raise ServeError.invalid(
            f"input '{name}': {datatype} data must come in raw_input_contents "
            "(InferTensorContents has no field for it)"
        )
    field_name, held = field
    values: Sequence[Any] = getattr(contents, field_name)
    count = math.prod(shape)
    if len(values) != count:
        raise ServeError.invalid(
            f"input '{name}': contents.{field_name} has {len(values)} elements but shape "
            f"{shape} needs {count}"
        )
    if datatype == "BYTES":
        array = np.empty(count, np.object_)
        array[:] = list(values)
        return array.reshape(shape)
    wide = np.fromiter(values, held, count)
    target = WIRE_TO_NUMPY[datatype]
    if target != held and count:
        info = np.iinfo(target)
        if int(wide.min()) < info.min or int(wide.max()) > info.max:
            raise ServeError.invalid(
                f"input '{name}': contents.{field_name} holds values out of range for {datatype}"
            )
    return wide.astype(target, copy=False).reshape(shape)


def requested_outputs(
    outputs: Sequence[pb.ModelInferRequest.InferRequestedOutputTensor],
) -> list[RequestedOutput] | None:
    """The outputs asked for (None: all); their parameters as plain values, so that e.g.
    "classification" reaches the model as an int."""
    if not outputs:
        return None
    result: list[RequestedOutput] = []
    seen: set[str] = set()
    for output in outputs:
        name = output.name
        if name in seen:
            raise ServeError.invalid(f"output '{name}' is requested more than once")
        seen.add(name)
        parameters = decode_parameters(output.parameters)
        result.append(RequestedOutput(name, parameters, output_region(parameters, name)))
    return result


def decode_parameters(parameters: ParameterMap) -> dict[str, Any]:
    """map<string, InferParameter> as plain values (bool, int, str or float); a parameter
    with no value set is left out."""
    if not parameters:
        return {}
    result: dict[str, Any] = {}
    for key, parameter in parameters.items():
        choice = parameter.WhichOneof("parameter_choice")
        if choice is not None:
            result[key] = getattr(parameter, choice)
    return result


def encode_parameters(values: Mapping[str, Any], target: Any) -> None:
    """Plain values into a map<string, InferParameter> (`target`)."""
    for key, value in values.items():
        parameter = target[key]
        if isinstance(value, (bool, np.bool_)):
            parameter.bool_param = bool(value)
        elif isinstance(value, (int, np.integer)):
            if value > _INT64_MAX:
                parameter.uint64_param = int(value)
            else:
                parameter.int64_param = int(value)
        elif isinstance(value, (float, np.floating)):
            parameter.double_param = float(value)
        else:
            parameter.string_param = value if isinstance(value, str) else str(value)
