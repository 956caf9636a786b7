"""Property-based fuzzing of everything that parses what a client or a model folder sends:
the HTTP infer codec (JSON and binary, every datatype, BYTES length prefixes, shapes), the
gRPC infer codec from raw message bytes, the BYTES framing, config text and JSON overrides.
Whatever the input, a parser either succeeds or raises its own error type with a message
(a client's mistake is never an unexpected exception, which the server would answer 500).

Deterministic (derandomized, a fixed number of examples) and bounded in time."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import orjson
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2 as pb

from protocol.datatypes import WIRE_TO_NUMPY
from protocol.errors import ProtocolError
from protocol.tensors import parse_bytes_tensor
from serve.config.model_config import config_from_json, parse_config_text
from serve.errors import ServeError
from serve.grpc import codec as grpc_codec
from serve.http import codec as http_codec

FUZZ = settings(
    derandomize=True,
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
DATATYPES = sorted(WIRE_TO_NUMPY)
# JSON-ish values, with the numbers that break naive code (huge, negative, bools as ints)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
JSON = st.recursive(
    SCALARS,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=24,
)
SHAPES = st.lists(
    st.one_of(
        st.integers(min_value=-2, max_value=6), st.integers(min_value=0, max_value=2**63 - 1)
    ),
    max_size=4,
)


def _decode_http(body: bytes, header_length: int | None) -> None:
    try:
        http_codec.decode_infer_request(body, header_length, "m", "")
    except ServeError as exc:
        assert exc.message


@FUZZ
@given(st.binary(max_size=256), st.one_of(st.none(), st.integers(-4, 300)))
def test_http_decoder_on_arbitrary_bytes(body: bytes, header_length: int | None) -> None:
    _decode_http(body, header_length)


@st.composite
def _http_request(draw: st.DrawFn) -> tuple[bytes, int | None]:
    """A request header that is nearly right: real datatypes and shapes, data that may or may
    not match, binary sizes that may or may not add up."""
    inputs = []
    blobs = b""
    for index in range(draw(st.integers(1, 3))):
        spec: dict[str, Any] = {
            "name": draw(st.sampled_from(["IN", "IN", f"IN{index}", ""])),
            "datatype": draw(st.sampled_from([*DATATYPES, "INT3", 7])),
            "shape": draw(SHAPES),
        }
        how = draw(st.sampled_from(["json", "binary", "region", "none"]))
        if how == "json":
            spec["data"] = draw(st.lists(SCALARS, max_size=8) | JSON)
        elif how == "binary":
            blob = draw(st.binary(max_size=64))
            size = draw(st.sampled_from([len(blob), len(blob) + 1, 0, -1, 2**62]))
            spec["parameters"] = {"binary_data_size": size}
            blobs += blob
        elif how == "region":
            spec["parameters"] = {
                "shared_memory_region": draw(st.text(max_size=4)),
                "shared_memory_byte_size": draw(st.integers(-1, 2**64 - 1)),
                "shared_memory_offset": draw(st.integers(-1, 64)),
            }
        inputs.append(spec)
    header: dict[str, Any] = {"inputs": inputs}
    if draw(st.booleans()):
        header["outputs"] = draw(
            st.lists(st.fixed_dictionaries({"name": st.text(max_size=3)}), max_size=2) | JSON
        )
    if draw(st.booleans()):
        header["parameters"] = draw(JSON)
    raw = orjson.dumps(header)
    return raw + blobs, (len(raw) if blobs or draw(st.booleans()) else None)


@FUZZ
@given(_http_request())
def test_http_decoder_on_nearly_right_requests(request: tuple[bytes, int | None]) -> None:
    _decode_http(*request)


@FUZZ
@given(st.binary(max_size=256))
def test_header_length_values(value: bytes) -> None:
    try:
        http_codec.parse_header_length(value)
    except ServeError as exc:
        assert "Inference-Header-Content-Length" in exc.message


@st.composite
def _grpc_request(draw: st.DrawFn) -> bytes:
    message = pb.ModelInferRequest(model_name="m")
    for index in range(draw(st.integers(0, 3))):
        tensor = message.inputs.add(
            name=draw(st.sampled_from(["A", "B", f"T{index}"])),
            datatype=draw(st.sampled_from([*DATATYPES, "X"])),
            shape=draw(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=4)),
        )
        if draw(st.booleans()):
            tensor.contents.int_contents.extend(
                draw(st.lists(st.integers(-(2**31), 2**31 - 1), max_size=6))
            )
        if draw(st.booleans()):
            tensor.contents.bytes_contents.extend(draw(st.lists(st.binary(max_size=4), max_size=3)))
        if draw(st.booleans()):
            tensor.parameters["shared_memory_region"].string_param = draw(st.text(max_size=3))
    for _ in range(draw(st.integers(0, 3))):
        message.raw_input_contents.append(draw(st.binary(max_size=32)))
    for _ in range(draw(st.integers(0, 2))):
        message.outputs.add(name=draw(st.sampled_from(["A", "O", "O"])))
    data = message.SerializeToString()
    if draw(st.booleans()):  # and then break the wire bytes
        cut = draw(st.integers(0, len(data)))
        data = data[:cut] + draw(st.binary(max_size=8))
    return data


@FUZZ
@given(_grpc_request())
def test_grpc_decoder_on_messages_and_broken_bytes(data: bytes) -> None:
    try:
        message = pb.ModelInferRequest.FromString(data)
    except DecodeError:
        return  # the transport answers INVALID_ARGUMENT "malformed ModelInferRequest"
    try:
        grpc_codec.decode_infer_request(message)
    except ServeError as exc:
        assert exc.message


@FUZZ
@given(st.binary(max_size=128), st.integers(-1, 40))
def test_bytes_framing(buffer: bytes, count: int) -> None:
    try:
        items = parse_bytes_tensor(buffer, 0, len(buffer), count, "input 'X'")
    except ProtocolError as exc:
        assert "input 'X'" in str(exc)
        return
    assert isinstance(items, np.ndarray)
    assert sum(4 + len(item) for item in items) == len(buffer)


@FUZZ
@given(st.lists(st.binary(max_size=12), max_size=6))
def test_bytes_framing_round_trips(elements: list[bytes]) -> None:
    buffer = b"".join(struct.pack("<I", len(e)) + e for e in elements)
    items = parse_bytes_tensor(buffer, 0, len(buffer), len(elements), "input 'X'")
    assert items.tolist() == elements


CONFIG_WORDS = st.sampled_from(
    [
        "name:",
        '"m"',
        "max_batch_size:",
        "8",
        "-1",
        "99999999999999999999",
        "input",
        "output",
        "[",
        "]",
        "{",
        "}",
        "dims:",
        "data_type:",
        "TYPE_FP32",
        "dynamic_batching",
        "instance_group",
        "count:",
        "parameters",
        "key:",
        "value:",
        "string_value:",
        ",",
        ":",
        "#",
        "\n",
        "'",
        '"',
    ]
)


@FUZZ
@given(st.lists(CONFIG_WORDS, max_size=40).map(" ".join) | st.text(max_size=80))
def test_config_text(text: str) -> None:
    try:
        parse_config_text(text, "config.pbtxt")
    except ServeError as exc:
        assert "config.pbtxt" in exc.message


@FUZZ
@given(JSON.map(orjson.dumps) | st.binary(max_size=64))
def test_config_overrides(text: bytes) -> None:
    try:
        config_from_json(text, "its config override")
    except ServeError as exc:
        assert exc.message
