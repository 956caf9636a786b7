"""config.pbtxt: parsing, Triton's validation rules, ONNX auto-complete and atomic write-back."""

from __future__ import annotations

import os
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper
from tritonclient.grpc import model_config_pb2 as mc

from serve.backends.onnxruntime import OnnxRuntimeBackend
from serve.config.model_config import (
    config_from_json,
    config_to_json,
    config_to_text,
    parse_config_text,
    read_config_file,
    write_config_file,
)
from serve.config.validate import validate_config
from serve.errors import ErrorKind, ServeError
from serve.repository.discovery import prepare_config, select_versions

BASE = """
name: "m"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [{ name: "x" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "y" data_type: TYPE_FP32 dims: [4] }]
"""


def _invalid(text: str) -> str:
    config = parse_config_text(text, "m/config.pbtxt")
    with pytest.raises(ServeError) as caught:
        validate_config(config, "m/config.pbtxt", "m")
    assert caught.value.kind is ErrorKind.INVALID_ARGUMENT
    assert caught.value.message.startswith("m/config.pbtxt: ")
    return caught.value.message


def test_parse_error_names_file_and_line() -> None:
    with pytest.raises(ServeError, match=r"cfg\.pbtxt: 1:.*max_batch_sizes"):
        parse_config_text("max_batch_sizes: 3", "cfg.pbtxt")


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ("dynamic_batching { preferred_batch_size: [16] }", "preferred_batch_size[0]"),
        ("dynamic_batching { preferred_batch_size: [0] }", "preferred_batch_size[0]"),
        ('input [{ name: "x" data_type: TYPE_FP32 dims: [2] }]', "input 'x'"),
        ('input [{ name: "z" dims: [2] }]', "input 'z'.data_type"),
        ('input [{ name: "z" data_type: TYPE_BF16 dims: [2] }]', "input 'z'.data_type"),
        ('input [{ name: "z" data_type: TYPE_FP32 dims: [0] }]', "input 'z'.dims[0]"),
        ('input [{ name: "z" data_type: TYPE_FP32 dims: [-2] }]', "input 'z'.dims[0]"),
        (
            'input [{ name: "z" data_type: TYPE_FP32 dims: [6] reshape { shape: [4] } }]',
            "input 'z'.reshape",
        ),
        (
            "sequence_batching { direct { minimum_slot_utilization: 2 } }",
            "sequence_batching.direct.minimum_slot_utilization",
        ),
        ("instance_group [{ count: -1 }]", "instance_group[0].count"),
        ("dynamic_batching { priority_levels: 2 default_priority_level: 3 }", "default_priority"),
        ('model_warmup [{ name: "w" batch_size: 9 }]', "model_warmup[0].batch_size"),
        ("version_policy { specific {} }", "version_policy.specific.versions"),
    ],
)
def test_validation_names_the_field(extra: str, field: str) -> None:
    assert field in _invalid(BASE + extra)


def test_negative_max_batch_size() -> None:
    assert "max_batch_size: must be >= 0" in _invalid(BASE.replace("size: 8", "size: -1"))


def test_dynamic_batching_needs_max_batch_size() -> None:
    text = BASE.replace("max_batch_size: 8", "max_batch_size: 0") + "dynamic_batching {}"
    assert "dynamic_batching" in _invalid(text)


def test_name_must_match_directory() -> None:
    config = parse_config_text(BASE, "c")
    with pytest.raises(ServeError, match="does not match the model directory 'other'"):
        validate_config(config, "c", "other")


def test_valid_config_passes() -> None:
    text = (
        BASE
        + """
dynamic_batching { preferred_batch_size: [4, 8] max_queue_delay_microseconds: 100
  priority_levels: 2 default_priority_level: 1
  default_queue_policy { max_queue_size: 4 timeout_action: DELAY } }
instance_group [{ count: 2 kind: KIND_CPU }]
model_warmup [{ name: "w" batch_size: 2 inputs { key: "x" value {
  data_type: TYPE_FP32 dims: [4] zero_data: true } } }]
"""
    )
    validate_config(parse_config_text(text, "c"), "c", "m")


def test_text_keeps_max_batch_size_zero_and_is_byte_stable(tmp_path: Path) -> None:
    config = parse_config_text(BASE.replace("max_batch_size: 8", "max_batch_size: 0"), "c")
    text = config_to_text(config)
    assert "max_batch_size: 0\n" in text
    assert text.index("max_batch_size") < text.index("input")
    path = tmp_path / "config.pbtxt"
    write_config_file(path, config)
    first = path.read_bytes()
    write_config_file(path, read_config_file(path))
    assert path.read_bytes() == first
    assert read_config_file(path) == config


def test_write_is_atomic_and_leaves_no_temporary_files(tmp_path: Path) -> None:
    path = tmp_path / "config.pbtxt"
    path.write_text("old")
    write_config_file(path, parse_config_text(BASE, "c"))
    assert os.listdir(tmp_path) == ["config.pbtxt"]
    assert read_config_file(path).name == "m"


def test_json_form_matches_triton() -> None:
    config = parse_config_text(BASE + "dynamic_batching { max_queue_delay_microseconds: 5 }", "c")
    as_json = config_to_json(config)
    assert as_json["max_batch_size"] == 8
    assert as_json["input"][0]["dims"] == [4]  # numbers, not strings
    assert as_json["dynamic_batching"]["max_queue_delay_microseconds"] == 5
    assert as_json["input"][0]["data_type"] == "TYPE_FP32"
    import json

    assert config_from_json(json.dumps(as_json), "override") == config


def _onnx_model(path: Path, batch: bool) -> None:
    first = "n" if batch else 2
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [first, 3])
    y = helper.make_tensor_value_info("y", TensorProto.INT64, [first, 3])
    graph = helper.make_graph([helper.make_node("Cast", ["x"], ["y"], to=7)], "g", [x], [y])
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.mark.parametrize("batch", [True, False])
def test_autocomplete_from_onnx(tmp_path: Path, batch: bool) -> None:
    _onnx_model(tmp_path / "m" / "1" / "model.onnx", batch)
    config, versions, _ = prepare_config(tmp_path / "m")
    assert versions == [1]
    assert config.name == "m" and config.backend == "onnxruntime"
    assert [t.name for t in config.input] == ["x"]
    assert config.input[0].data_type == mc.TYPE_FP32
    assert config.output[0].data_type == mc.TYPE_INT64
    if batch:
        assert config.max_batch_size == 4
        assert list(config.input[0].dims) == [3]
        assert config.HasField("dynamic_batching")
    else:
        assert config.max_batch_size == 0
        assert list(config.input[0].dims) == [2, 3]


def test_partial_config_is_completed(tmp_path: Path) -> None:
    _onnx_model(tmp_path / "m" / "1" / "model.onnx", True)
    (tmp_path / "m" / "config.pbtxt").write_text('max_batch_size: 2\ninput [{ name: "x" }]')
    config, _, _ = prepare_config(tmp_path / "m")
    assert list(config.input[0].dims) == [3] and config.input[0].data_type == mc.TYPE_FP32
    assert [t.name for t in config.output] == ["y"]
    assert config.max_batch_size == 2


def test_unreadable_model_names_file(tmp_path: Path) -> None:
    model = tmp_path / "m" / "1" / "model.onnx"
    model.parent.mkdir(parents=True)
    model.write_bytes(b"not onnx")
    with pytest.raises(ServeError, match=r"model\.onnx"):
        OnnxRuntimeBackend().autocomplete(mc.ModelConfig(), model)


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("", [3]),
        ("version_policy { latest { num_versions: 2 } }", [2, 3]),
        ("version_policy { all {} }", [1, 2, 3]),
        ("version_policy { specific { versions: [1, 3] } }", [1, 3]),
    ],
)
def test_version_policy(policy: str, expected: list[int]) -> None:
    assert select_versions(parse_config_text(policy, "c"), [1, 2, 3]) == expected
