"""Request-level parameters (the sequence extension's `sequence_id`, `sequence_start`,
`sequence_end`) added to infer requests that were framed once without them.

HTTP: the JSON header gains a top-level `"parameters"` object (KServe v2's request
parameters). gRPC: `ModelInferRequest.parameters` entries (InferParameter: int64_param,
string_param, bool_param) are serialized on their own and appended: protobuf merges a
map field entry by entry, so the payload is never parsed or serialized again.
"""

from __future__ import annotations

from collections.abc import Mapping

import orjson
from tritonclient.grpc import service_pb2 as pb

# Triton's sequence extension (docs/protocol/extension_sequence.md): an id (an unsigned
# integer or a string), and flags on a sequence's first and last requests.
SEQUENCE_ID = "sequence_id"
SEQUENCE_START = "sequence_start"
SEQUENCE_END = "sequence_end"

ParameterValue = bool | int | str


def sequence_parameters(
    sequence_id: int | str, start: bool, end: bool
) -> dict[str, ParameterValue]:
    """The parameters of one request of a sequence (as Triton's clients send them: the id
    and both flags, every time)."""
    return {SEQUENCE_ID: sequence_id, SEQUENCE_START: start, SEQUENCE_END: end}


def json_header_with_parameters(header: bytes, parameters: Mapping[str, ParameterValue]) -> bytes:
    """An infer request's JSON header (an object with at least one member) with request
    `parameters` added as its first member."""
    if not header.startswith(b"{") or header == b"{}":
        raise ValueError("the JSON header must be an object with members")
    return b'{"parameters":' + orjson.dumps(dict(parameters)) + b"," + header[1:]


def grpc_parameters_suffix(parameters: Mapping[str, ParameterValue]) -> bytes:
    """Bytes to append to a serialized ModelInferRequest to set `parameters`."""
    request = pb.ModelInferRequest()
    for name, value in parameters.items():
        entry = request.parameters[name]
        if isinstance(value, bool):  # before int: bool is an int
            entry.bool_param = value
        elif isinstance(value, int):
            if value >= 2**63:
                entry.uint64_param = value
            else:
                entry.int64_param = value
        else:
            entry.string_param = value
    return request.SerializeToString()
