"""The analyzer's request inputs and their HTTP encoding.

Payloads are checked against tritonclient's own request encoding, and decoded with the server's
codec to prove our server reads them as meant (tests may use serve/; analyzer/ never does).
"""

from __future__ import annotations

import base64
import struct
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
import tritonclient.http as triton_http

from analyzer.errors import AnalyzerError
from analyzer.inputs import RANDOM_INT_HIGH, InputTensor, build_input_sets
from analyzer.load.factory import build_target
from analyzer.load.options import LoadOptions, ModelInfo, TensorInfo
from protocol.client.http import HttpClient
from protocol.client.infer_body import encode_infer_body
from protocol.errors import ProtocolError
from protocol.tensors import tensor_bytes
from serve.http.codec import decode_infer_request

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


def model(
    inputs: dict[str, tuple[str, list[int]]],
    max_batch_size: int = 8,
    optional: tuple[str, ...] = (),
) -> ModelInfo:
    """A model whose metadata shapes carry the batch dim when it batches."""
    batch = [-1] if max_batch_size else []
    tensors = [TensorInfo(n, dt, batch + dims) for n, (dt, dims) in inputs.items()]
    config = {
        "max_batch_size": max_batch_size,
        "input": [{"name": n, "optional": n in optional} for n in inputs],
    }
    outputs = [TensorInfo("OUT", "FP32", [*batch, 1])]
    return ModelInfo("m", "1", max_batch_size, tensors, outputs, config)


def options(**kwargs: Any) -> LoadOptions:
    return LoadOptions(url="127.0.0.1:8000", model="m", **kwargs)


def by_name(inputs: list[InputTensor]) -> dict[str, InputTensor]:
    return {t.name: t for t in inputs}


def decode(body: bytes, header_length: int | None) -> dict[str, np.ndarray]:
    return decode_infer_request(body, header_length, "m", "").inputs


ALL_TYPES = model({f"IN_{dt}": (dt, [2, 3]) for dt in DATATYPES})


# random and zero data


def test_random_data_for_every_datatype_is_typed_seeded_and_stacked() -> None:
    sets = build_input_sets(ALL_TYPES, options(batch_size=2, string_length=5))
    assert len(sets) == 1
    tensors = by_name(sets[0])
    for datatype in DATATYPES:
        tensor = tensors[f"IN_{datatype}"]
        assert tensor.datatype == datatype
        assert tensor.shape == (2, 2, 3)
        assert tensor.data.shape == (2, 2, 3)
        np.testing.assert_array_equal(tensor.data[0], tensor.data[1])  # one sample, stacked
        if datatype == "BYTES":
            assert all(isinstance(v, bytes) and len(v) == 5 for v in tensor.data.flat)
            assert all(v.isalnum() for v in tensor.data.flat)
        elif datatype.startswith(("INT", "UINT")):
            assert tensor.data.min() >= 0 and tensor.data.max() < RANDOM_INT_HIGH
        elif datatype.startswith("FP"):
            assert np.isfinite(tensor.data).all()
            assert tensor.data.min() >= 0 and tensor.data.max() <= 1
    again = by_name(build_input_sets(ALL_TYPES, options(batch_size=2, string_length=5))[0])
    other = by_name(build_input_sets(ALL_TYPES, options(batch_size=2, string_length=5, seed=7))[0])
    np.testing.assert_array_equal(again["IN_FP32"].data, tensors["IN_FP32"].data)
    assert not np.array_equal(other["IN_FP32"].data, tensors["IN_FP32"].data)


def test_zero_data_and_string_data() -> None:
    sets = build_input_sets(ALL_TYPES, options(input_data=["zero"]))
    for tensor in sets[0]:
        if tensor.datatype == "BYTES":
            assert set(tensor.data.flat) == {b""}
        else:
            assert not tensor.data.any()
    strings = model({"S": ("BYTES", [4])})
    tensor = build_input_sets(strings, options(string_data="hey"))[0][0]
    assert list(tensor.data.flat) == [b"hey"] * 4


@pytest.mark.parametrize("datatype", DATATYPES)
def test_binary_body_matches_tritonclient_and_our_server_decodes_it(datatype: str) -> None:
    single = model({"INPUT0": (datatype, [2, 3]), "INPUT1": (datatype, [1])})
    inputs = build_input_sets(single, options(batch_size=3))[0]
    body, header_length = encode_infer_body(inputs, ["OUT"])

    triton_inputs = []
    for tensor in inputs:
        triton_input = triton_http.InferInput(tensor.name, list(tensor.shape), datatype)
        triton_input.set_data_from_numpy(tensor.data, binary_data=True)
        triton_inputs.append(triton_input)
    outputs = [triton_http.InferRequestedOutput("OUT", binary_data=True)]
    expected, expected_length = triton_http.InferenceServerClient.generate_request_body(
        triton_inputs, outputs=outputs
    )
    assert header_length is not None and expected_length is not None
    header = orjson.loads(body[:header_length])
    assert header.pop("id") == ""  # perf_analyzer's requests carry an empty id
    assert header == orjson.loads(expected[:expected_length])
    assert body[header_length:] == expected[expected_length:]

    decoded = decode(body, header_length)
    for tensor in inputs:
        np.testing.assert_array_equal(decoded[tensor.name], tensor.data)


@pytest.mark.parametrize("datatype", DATATYPES)
def test_json_body_is_understood_by_our_server(datatype: str) -> None:
    single = model({"INPUT0": (datatype, [2, 2])})
    inputs = build_input_sets(single, options(batch_size=2))[0]
    body, header_length = encode_infer_body(inputs, ["OUT"], binary_inputs=False)
    assert header_length is None
    header = orjson.loads(body)
    assert header["outputs"] == [{"name": "OUT", "parameters": {"binary_data": True}}]
    decoded = decode(body, None)["INPUT0"]
    if datatype == "BYTES":
        assert list(decoded.flat) == list(inputs[0].data.flat)
    else:
        np.testing.assert_array_equal(decoded, inputs[0].data)


def test_json_outputs_are_requested_when_asked() -> None:
    inputs = build_input_sets(model({"A": ("FP32", [1])}), options())[0]
    body, length = encode_infer_body(inputs, ["OUT"], binary_outputs=False)
    assert length is not None
    assert orjson.loads(body[:length])["outputs"][0]["parameters"] == {"binary_data": False}


def test_non_utf8_bytes_cannot_go_as_json(tmp_path: Path) -> None:
    data = np.array([b"\xff"], dtype=object)
    with pytest.raises(ProtocolError, match=r"input 'S' .*not UTF-8"):
        encode_infer_body([InputTensor("S", "BYTES", (1,), data)], [], binary_inputs=False)
    model_s = model({"S": ("BYTES", [1])})
    data_file = {"data": [{"S": {"b64": base64.b64encode(b"\x01\x00\x00\x00\xff").decode()}}]}
    path = tmp_path / "data.json"
    path.write_bytes(orjson.dumps(data_file))
    chosen = options(input_data=[str(path)], input_tensor_format="json")
    with pytest.raises(AnalyzerError, match=r"input 'S' .*--input-tensor-format binary"):
        build_target(HttpClient("127.0.0.1:1"), model_s, chosen, build_input_sets(model_s, chosen))


def test_bytes_tensor_is_length_prefixed() -> None:
    data = np.array([b"ab", b""], dtype=object)
    encoded = tensor_bytes("BYTES", data)
    assert encoded == struct.pack("<I", 2) + b"ab" + struct.pack("<I", 0)


# shapes and batch size


def test_variable_dims_need_shape_flag_naming_the_input() -> None:
    variable = model({"IMAGE": ("FP32", [3, -1, -1]), "FIXED": ("INT32", [4])})
    with pytest.raises(AnalyzerError, match=r"input 'IMAGE' has a variable shape .*--shape IMAGE"):
        build_input_sets(variable, options())
    tensors = by_name(build_input_sets(variable, options(shapes={"IMAGE": [3, 8, 9]}))[0])
    assert tensors["IMAGE"].shape == (1, 3, 8, 9)
    assert tensors["FIXED"].shape == (1, 4)


@pytest.mark.parametrize(
    ("shapes", "message"),
    [
        ({"IMAGE": [8, 9]}, "--shape gives input 'IMAGE' the shape \\[8, 9\\]"),
        ({"IMAGE": [4, 8, 9]}, "does not fit the model's shape \\[3, -1, -1\\]"),
        ({"NOPE": [1]}, "--shape names 'NOPE', which is not an input of model 'm'"),
    ],
)
def test_bad_shape_flags(shapes: dict[str, list[int]], message: str) -> None:
    variable = model({"IMAGE": ("FP32", [3, -1, -1])})
    with pytest.raises(AnalyzerError, match=message):
        build_input_sets(variable, options(shapes=shapes))


def test_non_batching_model_uses_full_shapes_and_refuses_batch_sizes() -> None:
    flat = model({"X": ("FP32", [2, -1])}, max_batch_size=0)
    tensor = build_input_sets(flat, options(shapes={"X": [2, 5]}))[0][0]
    assert tensor.shape == (2, 5)
    with pytest.raises(AnalyzerError, match=r"does not support batching .* -b must be 1, got 2"):
        build_input_sets(flat, options(batch_size=2, shapes={"X": [2, 5]}))


def test_batch_size_limits() -> None:
    with pytest.raises(AnalyzerError, match="-b 9 exceeds the max_batch_size 8"):
        build_input_sets(ALL_TYPES, options(batch_size=9))
    with pytest.raises(AnalyzerError, match="at least 1"):
        build_input_sets(ALL_TYPES, options(batch_size=0))


def test_shape_tensors_need_data() -> None:
    shaped = model({"S": ("INT32", [2])})
    shaped.config["input"][0]["is_shape_tensor"] = True
    with pytest.raises(AnalyzerError, match="input 'S' is a shape tensor"):
        build_input_sets(shaped, options())


# JSON data files


def write_json(path: Path, document: Any) -> str:
    path.write_bytes(orjson.dumps(document))
    return str(path)


SIMPLE = model({"INPUT0": ("INT32", [4]), "INPUT1": ("BYTES", [2])})


def test_json_entries_in_every_value_form(tmp_path: Path) -> None:
    raw = np.arange(4, dtype="<i4").tobytes()
    strings = struct.pack("<I", 1) + b"x" + struct.pack("<I", 2) + b"yz"
    document = {
        "data": [
            {"INPUT0": [1, 2, 3, 4], "INPUT1": ["a", "b"]},
            {
                "INPUT0": {"content": [[5, 6], [7, 8]], "shape": [4]},
                "INPUT1": {"content": ["c", "d"]},
            },
            {
                "INPUT0": {"b64": base64.b64encode(raw).decode()},
                "INPUT1": {"content": {"b64": base64.b64encode(strings).decode()}},
            },
        ],
        "validation_data": [{}, {}, {}],
    }
    sets = build_input_sets(SIMPLE, options(input_data=[write_json(tmp_path / "d.json", document)]))
    assert len(sets) == 3
    assert by_name(sets[0])["INPUT0"].data.tolist() == [[1, 2, 3, 4]]
    assert by_name(sets[1])["INPUT0"].data.tolist() == [[5, 6, 7, 8]]
    assert by_name(sets[2])["INPUT0"].data.tolist() == [[0, 1, 2, 3]]
    assert by_name(sets[0])["INPUT1"].data.tolist() == [[b"a", b"b"]]
    assert by_name(sets[2])["INPUT1"].data.tolist() == [[b"x", b"yz"]]


def test_json_entries_are_stacked_into_batches_cyclically(tmp_path: Path) -> None:
    entries = [{"INPUT0": [i] * 4, "INPUT1": [str(i), str(i)]} for i in range(3)]
    path = write_json(tmp_path / "d.json", {"data": entries})
    sets = build_input_sets(SIMPLE, options(input_data=[path], batch_size=2))
    firsts = [by_name(s)["INPUT0"].data[:, 0].tolist() for s in sets]
    assert firsts == [[0, 1], [2, 0], [1, 2]]
    assert by_name(sets[0])["INPUT1"].shape == (2, 2)


def test_several_json_files_and_sequence_steps(tmp_path: Path) -> None:
    one = write_json(tmp_path / "one.json", {"data": [{"INPUT0": [1] * 4, "INPUT1": ["a", "a"]}]})
    steps = [[{"INPUT0": [2] * 4, "INPUT1": ["b", "b"]}, {"INPUT0": [3] * 4, "INPUT1": ["c", "c"]}]]
    two = write_json(tmp_path / "two.json", {"data": steps})
    sets = build_input_sets(SIMPLE, options(input_data=[one, two]))
    assert [by_name(s)["INPUT0"].data[0, 0] for s in sets] == [1, 2, 3]


def test_json_shapes_resolve_variable_dims(tmp_path: Path) -> None:
    variable = model({"X": ("FP32", [-1])})
    path = write_json(tmp_path / "d.json", {"data": [{"X": {"content": [1, 2, 3], "shape": [3]}}]})
    assert build_input_sets(variable, options(input_data=[path]))[0][0].shape == (1, 3)
    flat = write_json(tmp_path / "flat.json", {"data": [{"X": [1, 2, 3]}]})
    with pytest.raises(AnalyzerError, match="input 'X' has a variable shape"):
        build_input_sets(variable, options(input_data=[flat]))
    assert build_input_sets(variable, options(input_data=[flat], shapes={"X": [3]}))[0][
        0
    ].shape == (1, 3)


def test_optional_inputs_may_be_left_out(tmp_path: Path) -> None:
    with_optional = model({"A": ("FP32", [1]), "B": ("FP32", [1])}, optional=("B",))
    path = write_json(tmp_path / "d.json", {"data": [{"A": [1.0]}]})
    assert [t.name for t in build_input_sets(with_optional, options(input_data=[path]))[0]] == ["A"]


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (
            {"data": [{"INPUT0": [1, 2, 3], "INPUT1": ["a", "b"]}]},
            "input 'INPUT0' expects 4 elements per batch item, the JSON data has 3",
        ),
        ({"data": [{"INPUT1": ["a", "b"]}]}, "data entry 0: no value for input 'INPUT0'"),
        (
            {"data": [{"INPUT0": [1] * 4, "INPUT1": ["a", "b"], "EXTRA": [1]}]},
            "'EXTRA' is not an input of model 'm'",
        ),
        (
            {"data": [{"INPUT0": [1.5] * 4, "INPUT1": ["a", "b"]}]},
            "input 'INPUT0' is INT32 but the JSON data holds floating-point numbers",
        ),
        (
            {"data": [{"INPUT0": [2**40] * 4, "INPUT1": ["a", "b"]}]},
            "input 'INPUT0' is INT32: the JSON value 1099511627776 is out of range",
        ),
        (
            {"data": [{"INPUT0": [1] * 4, "INPUT1": [1, 2]}]},
            "input 'INPUT1' is BYTES: its JSON values must be strings",
        ),
        (
            {"data": [{"INPUT0": {"b64": "AAAA"}, "INPUT1": ["a", "b"]}]},
            "input 'INPUT0' expects 16 bytes per batch item \\(4 x INT32\\), the b64 data has 3",
        ),
        (
            {"data": [{"INPUT0": {"b64": "!!"}, "INPUT1": ["a", "b"]}]},
            "the 'b64' value of 'INPUT0' is not base64",
        ),
        (
            {"data": [{"INPUT0": {"shape": [4]}, "INPUT1": ["a", "b"]}]},
            "the value of 'INPUT0' needs 'content' or 'b64'",
        ),
        (
            {"data": [{"INPUT0": [1] * 4, "INPUT1": ["a", "b"]}], "validation_data": []},
            "'validation_data' must be a list as long as 'data'",
        ),
        ({"entries": []}, "needs a top-level 'data' list"),
        ({"data": []}, "holds no data entries"),
    ],
)
def test_json_data_errors_name_the_tensor(tmp_path: Path, document: Any, message: str) -> None:
    path = write_json(tmp_path / "d.json", document)
    with pytest.raises(AnalyzerError, match=message):
        build_input_sets(SIMPLE, options(input_data=[path]))


def test_unreadable_and_invalid_sources(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    with pytest.raises(AnalyzerError, match="is not valid JSON"):
        build_input_sets(SIMPLE, options(input_data=[str(bad)]))
    with pytest.raises(AnalyzerError, match="neither random, zero, a JSON file nor a directory"):
        build_input_sets(SIMPLE, options(input_data=[str(tmp_path / "missing")]))
    with pytest.raises(AnalyzerError, match="cannot be combined"):
        build_input_sets(SIMPLE, options(input_data=["random", str(bad)]))


# raw-data directories


def test_directory_of_raw_files(tmp_path: Path) -> None:
    (tmp_path / "INPUT0").write_bytes(np.array([9, 8, 7, 6], dtype="<i4").tobytes())
    (tmp_path / "INPUT1").write_text("first\nsecond\n")
    tensors = by_name(
        build_input_sets(SIMPLE, options(input_data=[str(tmp_path)], batch_size=2))[0]
    )
    assert tensors["INPUT0"].data.tolist() == [[9, 8, 7, 6]] * 2
    assert tensors["INPUT1"].data.tolist() == [[b"first", b"second"]] * 2


def test_directory_errors(tmp_path: Path) -> None:
    (tmp_path / "INPUT0").write_bytes(b"\x00" * 12)
    (tmp_path / "INPUT1").write_text("only one\n")
    with pytest.raises(AnalyzerError, match="input 'INPUT0' expects 16 bytes per batch item"):
        build_input_sets(SIMPLE, options(input_data=[str(tmp_path)]))
    (tmp_path / "INPUT0").write_bytes(b"\x00" * 16)
    with pytest.raises(AnalyzerError, match="input 'INPUT1' expects 2 strings per batch item"):
        build_input_sets(SIMPLE, options(input_data=[str(tmp_path)]))
    (tmp_path / "STRAY").write_text("x")
    with pytest.raises(AnalyzerError, match="holds 'STRAY', which is not an input or output"):
        build_input_sets(SIMPLE, options(input_data=[str(tmp_path)]))
