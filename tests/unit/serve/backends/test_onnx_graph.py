"""The onnxruntime backend reads the ONNX graph only when the config leaves blanks: a config
that declares every tensor is loaded without parsing the model file in Python."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from serve.backends.onnxruntime import OnnxRuntimeBackend, graph_needed
from tests.conftest import BUNDLED_REPOSITORY


def _config(text: str) -> mc.ModelConfig:
    return text_format.Parse(text, mc.ModelConfig())


DECLARED = """
name: "m" max_batch_size: 8
input { name: "x" data_type: TYPE_FP32 dims: [ 4 ] }
output { name: "y" data_type: TYPE_FP32 dims: [ 4 ] }
"""


@pytest.mark.parametrize(
    ("text", "needed"),
    [
        (DECLARED, False),
        ('name: "m" max_batch_size: 8', True),
        (DECLARED.replace('output { name: "y" data_type: TYPE_FP32 dims: [ 4 ] }', ""), True),
        (
            DECLARED.replace("data_type: TYPE_FP32 dims: [ 4 ] }\noutput", "dims: [ 4 ] }\noutput"),
            True,
        ),
        (DECLARED.replace("dims: [ 4 ] }\noutput", "}\noutput"), True),
        (
            DECLARED.replace(
                "dims: [ 4 ] }\noutput", "dims: [ 4 ] reshape { shape: [] } }\noutput"
            ),
            False,
        ),
    ],
)
def test_the_graph_is_needed_only_for_blanks(text: str, needed: bool) -> None:
    assert graph_needed(_config(text)) is needed


def test_a_declared_config_is_not_read_from_the_file(tmp_path: Path) -> None:
    unreadable = tmp_path / "model.onnx"
    unreadable.write_bytes(b"not a model")
    config = _config(DECLARED)
    OnnxRuntimeBackend().autocomplete(config, unreadable)  # would fail if it parsed the file
    assert config.backend == "onnxruntime"
    assert [t.name for t in config.output] == ["y"]


def test_blanks_are_completed_from_the_graph() -> None:
    config = _config('name: "digits"')
    OnnxRuntimeBackend().autocomplete(config, BUNDLED_REPOSITORY / "digits" / "1" / "model.onnx")
    assert config.input and config.output
    assert all(t.data_type != mc.TYPE_INVALID and t.dims for t in config.input)
