"""The classification extension: ranking, value text, labels, checks and where it plugs in."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from serve.config.model_config import (
    config_from_json,
    config_to_json,
    read_config_file,
    write_config_file,
)
from serve.errors import ErrorKind, ServeError
from serve.inference import InferRequest, RequestedOutput
from serve.model import classification
from serve.model.classification import (
    check_classification,
    parse_labels,
    read_labels,
    topk_classification,
)
from serve.model.tensors import TensorChecker
from tests.conftest import BUNDLED_REPOSITORY

ROOT = Path(__file__).resolve().parents[4]
DIGITS = BUNDLED_REPOSITORY / "digits"


def _texts(result: np.ndarray) -> list[Any]:
    return result.tolist()


# ---------------------------------------------------------------- ranking and text


def test_triton_documented_example() -> None:
    # extension_classification.md: [1.1, 3.3, 0.5, 2.4], top 2 -> indexes 1 and 3.
    values = np.array([1.1, 3.3, 0.5, 2.4], np.float32)
    result = topk_classification(values, 2, batched=False)
    assert result.dtype == np.object_ and result.shape == (2,)
    assert _texts(result) == [b"3.300000:1", b"2.400000:3"]


def test_floats_print_six_decimals_like_std_to_string() -> None:
    values = np.array([[0.5, -1.25, 1e-7, 12345.678]], np.float64)
    assert _texts(topk_classification(values, 4, batched=True)) == [
        [b"12345.678000:3", b"0.500000:0", b"0.000000:2", b"-1.250000:1"]
    ]


def test_fp16_values_print_exactly() -> None:
    values = np.array([0.1, 0.7], np.float16)
    text = f"{float(np.float16(0.7)):f}:1".encode()
    assert _texts(topk_classification(values, 1, batched=False)) == [text]


@pytest.mark.parametrize(
    ("dtype", "values", "expected"),
    [
        (np.int8, [-3, 7, -128, 7], [b"7:1", b"7:3", b"-3:0", b"-128:2"]),
        (np.uint8, [0, 255, 3, 255], [b"255:1", b"255:3", b"3:2", b"0:0"]),
        (
            np.uint64,
            [2**64 - 1, 0, 2**64 - 1],
            [b"18446744073709551615:0", b"18446744073709551615:2", b"0:1"],
        ),
        (
            np.int64,
            [-(2**63), 2**63 - 1, -(2**63)],
            [b"9223372036854775807:1", b"-9223372036854775808:0", b"-9223372036854775808:2"],
        ),
    ],
    ids=["int8", "uint8", "uint64", "int64"],
)
def test_integers_rank_and_print_in_full(
    dtype: type[np.generic], values: list[int], expected: list[bytes]
) -> None:
    result = topk_classification(np.array(values, dtype), len(values), batched=False)
    assert _texts(result) == expected


def test_ties_go_to_the_lower_index() -> None:
    values = np.array([[1.0, 5.0, 5.0, 0.0, 5.0], [2.0, 2.0, 2.0, 2.0, 2.0]], np.float32)
    result = topk_classification(values, 4, batched=True)
    indexes = [[int(t.split(b":")[1]) for t in row] for row in _texts(result)]
    assert indexes == [[1, 2, 4, 0], [0, 1, 2, 3]]


def test_signed_zeros_tie_and_nan_ranks_last() -> None:
    values = np.array([np.nan, -0.0, 0.0, -np.inf, np.inf], np.float32)
    result = topk_classification(values, 5, batched=False)
    indexes = [int(t.split(b":")[1]) for t in _texts(result)]
    assert indexes == [4, 1, 2, 3, 0]
    assert _texts(result)[0] == b"inf:4" and _texts(result)[-1] == b"nan:0"


def test_matches_a_stable_descending_argsort() -> None:
    rng = np.random.default_rng(7)
    values = rng.integers(0, 6, (16, 40)).astype(np.float32)  # many ties
    result = topk_classification(values, 5, batched=True)
    expected = np.argsort(-values, axis=1, kind="stable")[:, :5]
    got = [[int(t.split(b":")[1]) for t in row] for row in _texts(result)]
    assert got == expected.tolist()
    for row, texts in zip(values, _texts(result), strict=True):
        assert [float(t.split(b":")[0]) for t in texts] == sorted(row.tolist(), reverse=True)[:5]


def test_class_count_above_the_classes_returns_them_all() -> None:
    assert topk_classification(np.arange(4, dtype=np.int32), 10, batched=False).shape == (4,)
    batched = topk_classification(np.zeros((2, 3), np.float32), 99, batched=True)
    assert batched.shape == (2, 3)


def test_batched_shape_flattens_the_non_batch_dimensions() -> None:
    values = np.arange(2 * 2 * 3, dtype=np.int32).reshape(2, 2, 3)
    result = topk_classification(values, 2, batched=True)
    assert result.shape == (2, 2)
    assert _texts(result) == [[b"5:5", b"4:4"], [b"11:5", b"10:4"]]


def test_non_batched_output_is_one_item() -> None:
    values = np.arange(2 * 3, dtype=np.int32).reshape(2, 3)
    result = topk_classification(values, 2, batched=False)
    assert result.shape == (2,)
    assert _texts(result) == [b"5:5", b"4:4"]


def test_batch_of_one_keeps_its_batch_dimension() -> None:
    result = topk_classification(np.array([[0.25, 0.75]], np.float32), 1, batched=True)
    assert result.shape == (1, 1) and _texts(result) == [[b"0.750000:1"]]


def test_labels_follow_the_index_and_missing_or_empty_ones_are_left_out() -> None:
    values = np.array([0.1, 0.4, 0.3, 0.2], np.float32)
    labels = (b"cat", b"", b"dog")  # index 1 empty, index 3 beyond the file
    result = topk_classification(values, 4, batched=False, labels=labels)
    assert _texts(result) == [b"0.400000:1", b"0.300000:2:dog", b"0.200000:3", b"0.100000:0:cat"]


def test_utf8_labels_stay_bytes() -> None:
    result = topk_classification(np.array([1.0], np.float32), 1, False, ("chat ñ".encode(),))
    assert _texts(result) == ["1.000000:0:chat ñ".encode()]


@pytest.mark.parametrize("count", [0, -1])
def test_class_count_must_be_positive(count: int) -> None:
    with pytest.raises(ServeError) as caught:
        topk_classification(np.zeros(3, np.float32), count, batched=False, output="probs")
    assert caught.value.kind is ErrorKind.INVALID_ARGUMENT
    assert "'probs'" in caught.value.message


@pytest.mark.parametrize(
    "values",
    [np.array([b"a", b"b"], dtype=np.object_), np.array([True, False])],
    ids=["bytes", "bool"],
)
def test_non_numeric_tensors_are_refused(values: np.ndarray) -> None:
    with pytest.raises(ServeError) as caught:
        topk_classification(values, 1, batched=False, output="words")
    assert caught.value.kind is ErrorKind.INVALID_ARGUMENT
    assert "'words'" in caught.value.message


def test_too_many_classes_per_item(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(classification, "MAX_CLASSES", 8)
    assert topk_classification(np.zeros((3, 8), np.float32), 1, True).shape == (3, 1)
    with pytest.raises(ServeError) as caught:
        topk_classification(np.zeros((1, 9), np.float32), 1, True, output="big")
    assert "'big'" in caught.value.message


# ---------------------------------------------------------------- the request parameter


@pytest.mark.parametrize(("value", "count"), [(1, 1), (3, 3), (1000, 1000), (np.int64(2), 2)])
def test_valid_class_counts(value: object, count: int) -> None:
    result = check_classification(value, "FP32", "logits", "digits")
    assert result == count and type(result) is int


@pytest.mark.parametrize("value", [0, -1, 2.5, 3.0, "3", True, None, [3]])
def test_invalid_class_counts_name_the_output(value: object) -> None:
    with pytest.raises(ServeError) as caught:
        check_classification(value, "FP32", "logits", "digits")
    assert caught.value.kind is ErrorKind.INVALID_ARGUMENT
    assert "'logits'" in caught.value.message and "'classification'" in caught.value.message


@pytest.mark.parametrize("datatype", ["BYTES", "BOOL"])
def test_non_numeric_outputs_cannot_be_classified(datatype: str) -> None:
    with pytest.raises(ServeError) as caught:
        check_classification(2, datatype, "OUTPUT0", "strings")
    assert caught.value.kind is ErrorKind.INVALID_ARGUMENT
    assert "'OUTPUT0'" in caught.value.message and datatype in caught.value.message


# ---------------------------------------------------------------- label files


@pytest.mark.parametrize(
    ("data", "labels"),
    [
        (b"a\nb\n", (b"a", b"b")),
        (b"a\nb", (b"a", b"b")),
        (b"a\r\nb\r\n", (b"a", b"b")),
        (b"a\n\nc\n", (b"a", b"", b"c")),
        (b"", ()),
        (b"\n", (b"",)),
    ],
)
def test_parse_labels_one_per_line(data: bytes, labels: tuple[bytes, ...]) -> None:
    assert parse_labels(data) == labels


def _config(label_filename: str, name: str = "m") -> mc.ModelConfig:
    config = mc.ModelConfig(name=name)
    config.output.add(name="probs", data_type=mc.TYPE_FP32, dims=[3], label_filename=label_filename)
    config.output.add(name="raw", data_type=mc.TYPE_FP32, dims=[3])
    return config


def test_read_labels_from_the_model_folder(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "names.txt").write_bytes(b"x\ny\nz\n")
    assert read_labels(_config("sub/names.txt"), tmp_path) == {"probs": (b"x", b"y", b"z")}


def test_a_symlinked_label_file_is_read(tmp_path: Path) -> None:
    # The tuner serves a scratch folder whose files are links to the real model folder.
    real = tmp_path / "real.txt"
    real.write_bytes(b"one\n")
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "labels.txt").symlink_to(real)
    assert read_labels(_config("labels.txt"), model_dir) == {"probs": (b"one",)}


def test_a_missing_label_file_fails_the_load(tmp_path: Path) -> None:
    with pytest.raises(ServeError) as caught:
        read_labels(_config("labels.txt", "mymodel"), tmp_path)
    message = caught.value.message
    assert "labels.txt" in message and "'probs'" in message and "'mymodel'" in message


@pytest.mark.parametrize("filename", ["../labels.txt", "a/../../labels.txt", "/etc/hostname"])
def test_label_files_outside_the_model_folder_are_refused(tmp_path: Path, filename: str) -> None:
    with pytest.raises(ServeError) as caught:
        read_labels(_config(filename), tmp_path / "model")
    assert caught.value.kind is ErrorKind.INVALID_ARGUMENT
    assert "inside the model folder" in caught.value.message


# ---------------------------------------------------------------- TensorChecker


def _checker(max_batch_size: int = 4) -> TensorChecker:
    config = text_format.Parse(
        f"""
        name: "m" max_batch_size: {max_batch_size}
        input {{ name: "x" data_type: TYPE_FP32 dims: [ 3 ] }}
        output {{ name: "probs" data_type: TYPE_FP32 dims: [ 3 ] label_filename: "l.txt" }}
        output {{ name: "raw" data_type: TYPE_FP32 dims: [ 3 ] }}
        output {{ name: "names" data_type: TYPE_STRING dims: [ 3 ] }}
        """,
        mc.ModelConfig(),
    )
    return TensorChecker(config, "1", {"probs": (b"a", b"b", b"c")})


def _request(outputs: list[RequestedOutput] | None, batch: int | None = 2) -> InferRequest:
    shape = (batch, 3) if batch else (3,)
    x = np.zeros(shape, np.float32)
    return InferRequest("m", "", {"x": x}, {"x": "FP32"}, requested_outputs=outputs)


def test_checker_returns_the_classification_instead_of_the_tensor() -> None:
    checker = _checker()
    request = _request(
        [RequestedOutput("probs", {"classification": 2}), RequestedOutput("raw", {})]
    )
    checker.check_request(request)
    produced = {
        "probs": np.array([[0.1, 0.7, 0.2], [0.6, 0.3, 0.1]], np.float32),
        "raw": np.ones((2, 3), np.float32),
        "names": np.array([[b"x"] * 3] * 2, dtype=np.object_),
    }
    response = checker.make_response(request, produced)
    probs, raw = response.outputs
    assert (probs.name, probs.datatype, probs.shape) == ("probs", "BYTES", (2, 2))
    assert probs.data.tolist() == [
        [b"0.700000:1:b", b"0.200000:2:c"],
        [b"0.600000:0:a", b"0.300000:1:b"],
    ]
    assert raw.datatype == "FP32" and raw.shape == (2, 3)


def test_checker_non_batching_model_gives_one_item() -> None:
    checker = _checker(max_batch_size=0)
    request = _request([RequestedOutput("raw", {"classification": 5})], batch=None)
    checker.check_request(request)
    response = checker.make_response(request, {"raw": np.array([3.0, 1.0, 2.0], np.float32)})
    assert response.outputs[0].shape == (3,)
    assert response.outputs[0].data.tolist() == [b"3.000000:0", b"2.000000:2", b"1.000000:1"]


def test_checker_refuses_before_queueing() -> None:
    checker = _checker()
    with pytest.raises(ServeError) as caught:
        checker.check_request(_request([RequestedOutput("names", {"classification": 1})]))
    assert "'names'" in caught.value.message and "BYTES" in caught.value.message
    with pytest.raises(ServeError) as caught:
        checker.check_request(_request([RequestedOutput("probs", {"classification": 0})]))
    assert "'probs'" in caught.value.message


def test_checker_without_the_parameter_returns_raw_tensors() -> None:
    checker = _checker()
    request = _request(None)
    checker.check_request(request)
    produced = {
        "probs": np.zeros((2, 3), np.float32),
        "raw": np.zeros((2, 3), np.float32),
        "names": np.array([[b"x"] * 3] * 2, dtype=np.object_),
    }
    datatypes = [o.datatype for o in checker.make_response(request, produced).outputs]
    assert datatypes == ["FP32", "FP32", "BYTES"]


# ---------------------------------------------------------------- the bundled digits model


def test_bundled_digits_has_a_label_per_class() -> None:
    config = read_config_file(DIGITS / "config.pbtxt")
    (logits,) = config.output
    assert logits.label_filename == "labels.txt"
    labels = read_labels(config, DIGITS)["logits"]
    assert len(labels) == logits.dims[0] == 10
    assert all(labels) and len(set(labels)) == 10


def test_build_script_copies_the_labels_with_the_config() -> None:
    spec = importlib.util.spec_from_file_location(
        "build_model_repository", ROOT / "scripts" / "build_model_repository.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert "labels.txt" in module.HAND_WRITTEN["digits"]


def test_tuner_write_back_keeps_label_filename(tmp_path: Path) -> None:
    from tuner.candidate import Candidate, apply
    from tuner.server_control import TuningServer

    base = read_config_file(DIGITS / "config.pbtxt")
    candidate = Candidate(
        {"max_batch_size": 16, "dynamic_batching": True, "instance_count": 2, "precision": "fp16"}
    )
    tuned = apply(candidate, base)
    assert tuned.output[0].label_filename == "labels.txt"
    via_json = config_from_json(json.dumps(config_to_json(tuned)), "override")  # tuner's load
    assert via_json.output[0].label_filename == "labels.txt"
    write_config_file(tmp_path / "config.pbtxt", tuned)
    assert read_config_file(tmp_path / "config.pbtxt").output[0].label_filename == "labels.txt"
    server = TuningServer(DIGITS, tmp_path)  # links the model's files, starts nothing
    try:
        scratch = server.repository / "digits"
        assert read_labels(tuned, scratch) == read_labels(base, DIGITS)
    finally:
        server.stop()
