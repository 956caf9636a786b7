"""The KServe v2 REST infer codec, checked against tritonclient's own HTTP encoding."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
import pytest
import tritonclient.http as triton_http
import tritonclient.utils as triton_utils

from protocol.tensors import serialize_bytes_tensor
from serve.errors import ErrorKind, ServeError
from serve.http.codec import (
    decode_infer_request,
    encode_error,
    encode_infer_response,
    parse_header_length,
)
from serve.inference import (
    InferRequest,
    InferResponse,
    OutputTensor,
    RegionSlice,
    RequestedOutput,
)

DATATYPES = [
    "BOOL",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "FP16",
    "FP32",
    "FP64",
    "BYTES",
]


def sample(datatype: str) -> np.ndarray:
    """A 2x3 tensor with edge values for the datatype."""
    if datatype == "BOOL":
        return np.array([[True, False, True], [False, False, True]])
    if datatype == "BYTES":
        strings = [b"", b"a", "h\u00e9llo".encode(), b"x" * 300, b"\x00tail", b"z"]
        return np.array(strings, dtype=np.object_).reshape(2, 3)
    dtype = np.dtype(triton_utils.triton_to_np_dtype(datatype))
    if dtype.kind == "f":
        return np.array([-1.5, 0.1, 1 / 3, 1e-3, 65504.0, -0.0], dtype=dtype).reshape(2, 3)
    info = np.iinfo(dtype)
    values = [int(info.min), int(info.max), 0, 1, 2, int(info.max) - 1]
    return np.array(values, dtype=dtype).reshape(2, 3)


def assert_same(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.shape == expected.shape
    assert actual.dtype == expected.dtype
    if expected.dtype.kind == "f":
        # -0.0 and 0.0 compare equal; check bits to be exact.
        assert actual.tobytes() == expected.tobytes()
    else:
        assert actual.tolist() == expected.tolist()


def triton_body(
    tensors: dict[str, np.ndarray], binary: bool, **kwargs: Any
) -> tuple[bytes, int | None]:
    inputs = []
    for name, array in tensors.items():
        datatype = triton_utils.np_to_triton_dtype(array.dtype)
        tensor = triton_http.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array, binary_data=binary)
        inputs.append(tensor)
    return triton_http.InferenceServerClient.generate_request_body(inputs, **kwargs)


def make_request(**kwargs: Any) -> InferRequest:
    return InferRequest(model_name="m", model_version="", inputs={}, **kwargs)


def encode_one(output: OutputTensor, request: InferRequest) -> triton_http.InferResult:
    response = InferResponse(model_name="m", model_version="1", outputs=[output])
    body, header_length = encode_infer_response(response, request)
    return triton_http.InferResult.from_response_body(body, header_length=header_length)


# --- requests built by tritonclient -------------------------------------------------------


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
@pytest.mark.parametrize("datatype", DATATYPES)
def test_decodes_tritonclient_request(datatype: str, binary: bool) -> None:
    array = sample(datatype)
    body, header_length = triton_body({"INPUT0": array}, binary, request_id="r-7")
    assert (header_length is not None) == binary

    request = decode_infer_request(body, header_length, "m", "1")

    assert request.model_name == "m" and request.model_version == "1"
    assert request.id == "r-7"
    assert request.input_datatypes == {"INPUT0": datatype}
    assert_same(request.inputs["INPUT0"], array)


def test_decodes_several_binary_and_json_inputs_in_order() -> None:
    tensors = {name: sample(name) for name in ("FP32", "BYTES", "INT8", "FP16")}
    inputs = []
    for index, (name, array) in enumerate(tensors.items()):
        tensor = triton_http.InferInput(name, list(array.shape), name)
        tensor.set_data_from_numpy(array, binary_data=index % 2 == 0)
        inputs.append(tensor)
    outputs = [
        triton_http.InferRequestedOutput("OUT0", binary_data=False),
        triton_http.InferRequestedOutput("OUT1", binary_data=True, class_count=3),
    ]
    body, header_length = triton_http.InferenceServerClient.generate_request_body(
        inputs, outputs=outputs, priority=2, timeout=1500, parameters={"custom": "x"}
    )

    request = decode_infer_request(body, header_length, "m", "")

    assert list(request.inputs) == list(tensors)
    for name, array in tensors.items():
        assert_same(request.inputs[name], array)
    assert request.requested_outputs == [
        RequestedOutput("OUT0", {"binary_data": False}),
        RequestedOutput("OUT1", {"classification": 3, "binary_data": True}),
    ]
    assert request.parameters == {"priority": 2, "timeout": 1500, "custom": "x"}
    assert request.priority == 2 and request.timeout_us == 1500
    assert request.id == ""


def test_no_outputs_means_every_output_binary() -> None:
    body, header_length = triton_body({"A": sample("FP32")}, binary=True)
    request = decode_infer_request(body, header_length, "m", "")
    assert request.requested_outputs is None
    assert request.parameters == {"binary_data_output": True}


def test_binary_fixed_size_inputs_are_views_of_the_body() -> None:
    body, header_length = triton_body({"A": sample("FP32")}, binary=True)
    array = decode_infer_request(body, header_length, "m", "").inputs["A"]
    assert not array.flags.owndata
    assert not array.flags.writeable


def test_decodes_nested_json_data() -> None:
    header = {
        "inputs": [
            {"name": "A", "shape": [2, 2], "datatype": "INT32", "data": [[1, 2], [3, 4]]},
            {"name": "S", "shape": [1, 2], "datatype": "BYTES", "data": [["x", "\u00e9"]]},
            {"name": "B", "shape": [3], "datatype": "BOOL", "data": [True, False, True]},
            {"name": "H", "shape": [2], "datatype": "FP16", "data": [0.5, 2]},
            {"name": "U", "shape": [2], "datatype": "UINT64", "data": [0, 2**64 - 1]},
        ]
    }
    request = decode_infer_request(orjson.dumps(header), None, "m", "")
    assert_same(request.inputs["A"], np.array([[1, 2], [3, 4]], dtype=np.int32))
    assert request.inputs["S"].tolist() == [[b"x", "\u00e9".encode()]]
    assert_same(request.inputs["B"], np.array([True, False, True]))
    assert_same(request.inputs["H"], np.array([0.5, 2.0], dtype=np.float16))
    assert_same(request.inputs["U"], np.array([0, 2**64 - 1], dtype=np.uint64))


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
@pytest.mark.parametrize("datatype", ["FP32", "BYTES", "BOOL"])
def test_decodes_empty_tensors(datatype: str, binary: bool) -> None:
    array = sample(datatype)[:0]
    body, header_length = triton_body({"E": array}, binary)
    decoded = decode_infer_request(body, header_length, "m", "").inputs["E"]
    assert decoded.shape == (0, 3)
    assert decoded.dtype == array.dtype


def test_binary_bytes_keep_non_utf8_elements() -> None:
    array = np.array([b"\xff\xfe", b"ok", b""], dtype=np.object_)
    body, header_length = triton_body({"S": array}, binary=True)
    assert decode_infer_request(body, header_length, "m", "").inputs["S"].tolist() == [
        b"\xff\xfe",
        b"ok",
        b"",
    ]


# --- responses read by tritonclient -------------------------------------------------------


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
@pytest.mark.parametrize("datatype", DATATYPES)
def test_tritonclient_reads_response(datatype: str, binary: bool) -> None:
    array = sample(datatype)
    request = make_request(requested_outputs=[RequestedOutput("OUT", {"binary_data": binary})])

    result = encode_one(OutputTensor("OUT", datatype, array), request)

    got = result.as_numpy("OUT")
    output = result.get_output("OUT")
    assert ("data" in output) == (not binary)
    assert output["shape"] == [2, 3] and output["datatype"] == datatype
    if datatype == "BYTES" and not binary:
        # tritonclient leaves JSON strings as str.
        assert got.tolist() == [[v.decode() for v in row] for row in array.tolist()]
    else:
        assert_same(got, array)


def test_response_with_mixed_outputs_and_header_length() -> None:
    request = make_request(
        id="abc",
        parameters={"binary_data_output": True},
        requested_outputs=[RequestedOutput("J", {"binary_data": False}), RequestedOutput("B")],
    )
    outputs = [
        OutputTensor("J", "FP32", sample("FP32")),
        OutputTensor("B", "INT64", sample("INT64")),
        OutputTensor("S", "BYTES", sample("BYTES")),
        OutputTensor("E", "FP32", np.zeros((0, 4), dtype=np.float32)),
    ]
    response = InferResponse(model_name="m", model_version="3", outputs=outputs)

    body, header_length = encode_infer_response(response, request)

    assert header_length is not None
    header = orjson.loads(body[:header_length])
    assert header["model_name"] == "m" and header["model_version"] == "3"
    assert header["id"] == "abc"
    assert "parameters" not in header
    assert [o["name"] for o in header["outputs"]] == ["J", "B", "S", "E"]
    assert "data" in header["outputs"][0]
    sizes = [o["parameters"]["binary_data_size"] for o in header["outputs"][1:]]
    assert sizes == [48, len(serialize_bytes_tensor(sample("BYTES"))), 0]
    assert len(body) == header_length + sum(sizes)
    result = triton_http.InferResult.from_response_body(body, header_length=header_length)
    for output in outputs:
        expected = output.data
        got = result.as_numpy(output.name)
        assert got.shape == expected.shape
        assert got.tolist() == expected.tolist()


def test_all_json_response_has_no_header_length() -> None:
    request = make_request(requested_outputs=[RequestedOutput("A")])
    response = InferResponse("m", "1", [OutputTensor("A", "FP16", sample("FP16"))])
    body, header_length = encode_infer_response(response, request)
    assert header_length is None
    data = orjson.loads(body)["outputs"][0]["data"]
    assert all(type(v) is float for v in data)
    assert_same(np.array(data, dtype=np.float16).reshape(2, 3), sample("FP16"))


@pytest.mark.parametrize(
    ("request_default", "per_output", "expect_binary"),
    [
        (None, None, False),
        (True, None, True),
        (True, False, False),
        (False, True, True),
        (None, True, True),
    ],
)
def test_binary_choice(
    request_default: bool | None, per_output: bool | None, expect_binary: bool
) -> None:
    parameters = {} if request_default is None else {"binary_data_output": request_default}
    out_params = {} if per_output is None else {"binary_data": per_output}
    request = make_request(
        parameters=parameters, requested_outputs=[RequestedOutput("A", out_params)]
    )
    response = InferResponse("m", "1", [OutputTensor("A", "INT32", sample("INT32"))])
    _, header_length = encode_infer_response(response, request)
    assert (header_length is not None) == expect_binary


def test_id_echoed_only_when_non_empty() -> None:
    response = InferResponse("m", "1", [OutputTensor("A", "INT8", sample("INT8"))])
    body, _ = encode_infer_response(response, make_request(id=""))
    assert "id" not in orjson.loads(body)
    body, _ = encode_infer_response(response, make_request(id="x"))
    assert orjson.loads(body)["id"] == "x"


def test_response_parameters_only_when_present() -> None:
    response = InferResponse(
        "m", "1", [OutputTensor("A", "INT8", sample("INT8"))], parameters={"k": 1}
    )
    body, _ = encode_infer_response(response, make_request())
    assert orjson.loads(body)["parameters"] == {"k": 1}


def test_non_utf8_bytes_asked_as_json_go_binary() -> None:
    array = np.array([b"\xff", b"ok"], dtype=np.object_)
    request = make_request(requested_outputs=[RequestedOutput("S", {"binary_data": False})])
    result = encode_one(OutputTensor("S", "BYTES", array), request)
    assert result.get_output("S")["parameters"]["binary_data_size"] == 11
    assert result.as_numpy("S").tolist() == [b"\xff", b"ok"]


def test_json_bytes_output_accepts_str_and_fixed_width_arrays() -> None:
    request = make_request()
    for array in (
        np.array(["a", b"b", 3], dtype=np.object_),
        np.array(["a", "b", "3"]),
        np.array([b"a", b"b", b"3"]),
    ):
        result = encode_one(OutputTensor("S", "BYTES", array), request)
        assert result.as_numpy("S").tolist() == ["a", "b", "3"]


def test_output_arrays_are_made_contiguous_and_of_the_wire_dtype() -> None:
    source = np.arange(12, dtype=np.float64).reshape(3, 4)
    request = make_request(parameters={"binary_data_output": True})
    result = encode_one(OutputTensor("T", "FP32", source.T), request)
    assert_same(result.as_numpy("T"), source.T.astype(np.float32))
    result = encode_one(OutputTensor("T", "FP32", source.T), make_request())
    assert_same(result.as_numpy("T"), source.T.astype(np.float32))


def test_unknown_output_datatype_is_internal() -> None:
    with pytest.raises(ServeError) as info:
        encode_one(OutputTensor("OUT", "FP8", np.zeros(2)), make_request())
    assert info.value.kind is ErrorKind.INTERNAL
    assert "OUT" in info.value.message


def test_encode_error() -> None:
    assert orjson.loads(encode_error('bad "x"')) == {"error": 'bad "x"'}


def test_parse_header_length() -> None:
    assert parse_header_length(None) is None
    assert parse_header_length("12") == 12
    assert parse_header_length(b"0") == 0
    for bad in ("-1", "1.5", "", " 3", "x", "\u00b2", "9" * 20, "1" * 5000):
        with pytest.raises(ServeError) as info:
            parse_header_length(bad)
        assert "Inference-Header-Content-Length" in info.value.message


# --- bad requests -------------------------------------------------------------------------


def body_of(header: dict[str, Any], binary: bytes = b"") -> tuple[bytes, int | None]:
    raw = orjson.dumps(header)
    return raw + binary, (len(raw) if binary else None)


def one_input(**fields: Any) -> dict[str, Any]:
    return {"inputs": [{"name": "IN", "shape": [2], "datatype": "FP32", **fields}]}


def binary_input(datatype: str, shape: list[int], size: int) -> dict[str, Any]:
    spec = {"name": "IN", "shape": shape, "datatype": datatype}
    return {"inputs": [{**spec, "parameters": {"binary_data_size": size}}]}


BYTES_TWO = b"\x01\x00\x00\x00a\x01\x00\x00\x00b"

BAD_REQUESTS: list[tuple[str, bytes, int | None, str]] = [
    ("malformed json", b'{"inputs": [', None, "malformed JSON"),
    ("invalid utf-8 json", b'{"id": "\xff"}', None, "malformed JSON"),
    ("header not an object", b"[1]", None, "JSON object"),
    ("header length too long", b"{}", 3, "Inference-Header-Content-Length 3 exceeds body"),
    ("header length negative", b"{}", -1, "Inference-Header-Content-Length"),
    ("missing inputs", b"{}", None, "'inputs'"),
    ("inputs not a list", *body_of({"inputs": {}}), "'inputs'"),
    ("input not an object", *body_of({"inputs": [3]}), "inputs[0]"),
    ("input without name", *body_of({"inputs": [{"shape": [1], "datatype": "FP32"}]}), "inputs[0]"),
    ("input without datatype", *body_of({"inputs": [{"name": "IN", "shape": [1]}]}), "'IN'"),
    ("input without shape", *body_of({"inputs": [{"name": "IN", "datatype": "FP32"}]}), "'IN'"),
    ("shape negative", *body_of(one_input(shape=[-1], data=[1.0])), "'IN': 'shape'"),
    ("shape of floats", *body_of(one_input(shape=[2.0], data=[1.0, 2.0])), "'IN': 'shape'"),
    ("shape of bools", *body_of(one_input(shape=[True], data=[1.0])), "'IN': 'shape'"),
    ("shape not a list", *body_of(one_input(shape=2, data=[1.0, 2.0])), "'IN': 'shape'"),
    (
        "shape beyond any tensor, empty",
        *body_of(one_input(shape=[0, 2**62, 4], data=[])),
        "'IN': shape [0, 4611686018427387904, 4] has more elements than a tensor can hold",
    ),
    (
        "shape beyond any tensor, binary",
        *body_of(binary_input("BYTES", [2**40, 2**40], 4), b"\x00" * 4),
        "more elements than a tensor can hold",
    ),
    (
        "json booleans for INT8",
        *body_of(one_input(datatype="INT8", data=[True, 1])),
        "'IN': 'data' holds booleans, not INT8",
    ),
    (
        "json booleans for FP32, nested",
        *body_of(one_input(shape=[1, 2], data=[[1.5, False]])),
        "'IN': 'data' holds booleans, not FP32",
    ),
    ("unknown datatype", *body_of(one_input(datatype="FP8", data=[1, 2])), "'IN': unknown"),
    (
        "duplicate input",
        *body_of({"inputs": one_input(data=[1.0, 2.0])["inputs"] * 2}),
        "'IN' appears more than once",
    ),
    ("no data", *body_of(one_input()), "'IN' has neither"),
    ("parameters not an object", *body_of(one_input(parameters=[1])), "'IN': 'parameters'"),
    (
        "data and binary",
        *body_of(one_input(data=[1.0, 2.0], parameters={"binary_data_size": 8}), b"\0" * 8),
        "'IN' has both",
    ),
    ("binary size negative", *body_of(binary_input("FP32", [2], -8)), "'IN': binary_data_size"),
    (
        "binary size a string",
        *body_of(binary_input("FP32", [2], "8"), b"\0" * 8),  # type: ignore[arg-type]
        "'IN': binary_data_size",
    ),
    (
        "binary size mismatch",
        *body_of(binary_input("FP32", [2], 4), b"\0" * 4),
        "'IN': binary_data_size 4 does not match",
    ),
    ("binary past end", *body_of(binary_input("FP32", [2], 8), b"\0" * 4), "'IN': binary_data"),
    (
        "binary without header length",
        orjson.dumps(binary_input("INT8", [2], 2)),
        None,
        "'IN': binary_data_size 2 runs past",
    ),
    ("trailing bytes", *body_of(binary_input("FP32", [2], 8), b"\0" * 9), "1 bytes"),
    ("trailing bytes after json", b'{"inputs": []}xx', 14, "2 bytes"),
    (
        "bytes truncated prefix",
        *body_of(binary_input("BYTES", [1], 3), b"\x01\x00\x00"),
        "'IN': truncated",
    ),
    (
        "bytes element past size",
        *body_of(binary_input("BYTES", [1], 6), b"\x05\x00\x00\x00ab"),
        "'IN': element 0",
    ),
    (
        "bytes too few elements",
        *body_of(binary_input("BYTES", [3], 10), BYTES_TWO),
        "'IN': BYTES data holds 2",
    ),
    (
        "bytes too many elements",
        *body_of(binary_input("BYTES", [1], 10), BYTES_TWO),
        "'IN': BYTES data holds more",
    ),
    ("json count", *body_of(one_input(data=[1.0, 2.0, 3.0])), "'IN': 'data' has 3 elements"),
    ("json nested count", *body_of(one_input(data=[[1.0], [2.0], [3.0]])), "'IN': 'data' has 3"),
    ("json ragged", *body_of(one_input(data=[[1.0], [2.0, 3.0]])), "'IN': 'data' must be"),
    ("json not a list", *body_of(one_input(data=1.0)), "'IN': 'data' must be a list"),
    ("json string for FP32", *body_of(one_input(data=["1", "2"])), "'IN': 'data' holds strings"),
    ("json bool for FP32", *body_of(one_input(data=[True, False])), "'IN': 'data' holds booleans"),
    ("json null", *body_of(one_input(data=[1.0, None])), "'IN': 'data' holds mixed"),
    (
        "json float for INT32",
        *body_of(one_input(datatype="INT32", data=[1, 2.5])),
        "'IN': 'data' holds non-integers",
    ),
    (
        "json int for BOOL",
        *body_of(one_input(datatype="BOOL", data=[1, 0])),
        "'IN': 'data' holds integers",
    ),
    (
        "json out of range UINT8",
        *body_of(one_input(datatype="UINT8", data=[1, 300])),
        "'IN': 'data' values out of range",
    ),
    (
        "json negative UINT64",
        *body_of(one_input(datatype="UINT64", data=[-1, 2**64 - 1])),
        "'IN': 'data' values out of range",
    ),
    (
        "json out of range FP16",
        *body_of(one_input(datatype="FP16", data=[1, 1e6])),
        "'IN': 'data' values out of range",
    ),
    (
        "json number for BYTES",
        *body_of(one_input(datatype="BYTES", data=["a", 1])),
        "'IN': BYTES 'data' must be",
    ),
    (
        "json ragged BYTES",
        *body_of(one_input(datatype="BYTES", data=[["a"], ["b", "c"]])),
        "'IN': BYTES 'data' must be",
    ),
    (
        "json BYTES count",
        *body_of(one_input(datatype="BYTES", data=["a", "b", "c"])),
        "'IN': 'data' has 3 elements",
    ),
    ("outputs not a list", *body_of({**one_input(data=[1, 2]), "outputs": {}}), "'outputs'"),
    ("output without name", *body_of({**one_input(data=[1, 2]), "outputs": [{}]}), "outputs[0]"),
    (
        "duplicate output",
        *body_of({**one_input(data=[1, 2]), "outputs": [{"name": "O"}, {"name": "O"}]}),
        "output 'O' is requested more than once",
    ),
    (
        "output parameters",
        *body_of({**one_input(data=[1, 2]), "outputs": [{"name": "O", "parameters": 1}]}),
        "output 'O': 'parameters'",
    ),
    ("id not a string", *body_of({**one_input(data=[1, 2]), "id": 5}), "'id'"),
    ("parameters not an object", *body_of({**one_input(data=[1, 2]), "parameters": []}), "request"),
]


@pytest.mark.parametrize(
    ("body", "header_length", "fragment"),
    [case[1:] for case in BAD_REQUESTS],
    ids=[case[0] for case in BAD_REQUESTS],
)
def test_bad_request_is_invalid_argument(
    body: bytes, header_length: int | None, fragment: str
) -> None:
    with pytest.raises(ServeError) as info:
        decode_infer_request(body, header_length, "m", "")
    assert info.value.kind is ErrorKind.INVALID_ARGUMENT
    assert fragment in info.value.message


def test_header_length_of_wrong_type() -> None:
    with pytest.raises(ServeError) as info:
        decode_infer_request(b"{}", "2", "m", "")  # type: ignore[arg-type]
    assert info.value.kind is ErrorKind.INVALID_ARGUMENT


def test_shared_memory_input_is_left_for_the_dataplane_with_its_shape_and_range() -> None:
    params = {"shared_memory_region": "r", "shared_memory_byte_size": 8}
    body, _ = body_of(one_input(parameters={**params, "shared_memory_offset": 4}))
    request = decode_infer_request(body, None, "m", "")
    assert request.inputs == {}
    assert request.input_datatypes == {"IN": "FP32"}
    assert request.region_inputs == {"IN": ((2,), RegionSlice("r", 4, 8))}


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        ({"parameters": {"shared_memory_region": "r"}}, "'shared_memory_byte_size' must be"),
        ({"parameters": {"shared_memory_byte_size": 8}}, "without 'shared_memory_region'"),
        (
            {
                "data": [1, 2],
                "parameters": {"shared_memory_region": "r", "shared_memory_byte_size": 8},
            },
            "only one of",
        ),
        (
            {"parameters": {"shared_memory_region": "r", "shared_memory_byte_size": -1}},
            "non-negative",
        ),
        ({"parameters": {"shared_memory_region": 3, "shared_memory_byte_size": 8}}, "region name"),
    ],
)
def test_bad_shared_memory_input_is_invalid_naming_it(
    fields: dict[str, Any], fragment: str
) -> None:
    body, _ = body_of(one_input(**fields))
    with pytest.raises(ServeError) as info:
        decode_infer_request(body, None, "m", "")
    assert info.value.kind is ErrorKind.INVALID_ARGUMENT
    assert "'IN'" in info.value.message
    assert fragment in info.value.message


def test_shared_memory_output_is_recognised_and_cannot_also_be_binary() -> None:
    shm = {"shared_memory_region": "o", "shared_memory_byte_size": 8}
    header = {**one_input(data=[1, 2]), "outputs": [{"name": "OUT", "parameters": shm}]}
    request = decode_infer_request(body_of(header)[0], None, "m", "")
    assert request.requested_outputs is not None
    assert request.requested_outputs[0].region == RegionSlice("o", 0, 8)

    header["outputs"] = [{"name": "OUT", "parameters": {**shm, "binary_data": True}}]
    with pytest.raises(ServeError, match="'OUT' can't set both"):
        decode_infer_request(body_of(header)[0], None, "m", "")


def test_output_written_to_shared_memory_carries_no_data() -> None:
    where = RegionSlice("o", 16, 8)
    output = OutputTensor("OUT", "FP32", np.ones(2, np.float32), where)
    response = InferResponse("m", "1", [output])
    body, length = encode_infer_response(response, InferRequest("m", "", {}))
    assert length is None
    entry = orjson.loads(body)["outputs"][0]
    # No parameters at all: Triton's C++ client reads binary_data_size from any it finds.
    assert entry == {"name": "OUT", "datatype": "FP32", "shape": [2]}


def test_json_numbers_beside_a_json_true_elsewhere_still_decode() -> None:
    """A request with `binary_data_output: true` makes the decoder look for booleans in its
    JSON data: plain numbers pass."""
    header = {**one_input(datatype="INT8", data=[1, 2]), "parameters": {"binary_data_output": True}}
    request = decode_infer_request(*body_of(header), "m", "")
    assert request.inputs["IN"].tolist() == [1, 2]


def test_json_booleans_for_bool_still_decode() -> None:
    request = decode_infer_request(
        *body_of(one_input(datatype="BOOL", data=[True, False])), "m", ""
    )
    assert request.inputs["IN"].tolist() == [True, False]
