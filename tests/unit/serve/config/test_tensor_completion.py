"""Completing a config's tensors from what the model says (one rule for the ONNX graph, the
TensorRT engine and a python model's auto_complete_config)."""

from __future__ import annotations

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from serve.config.tensor_completion import FoundTensor, complete_tensors
from serve.errors import ServeError

FOUND = [
    FoundTensor("a", mc.TYPE_FP32, (3, -1)),
    FoundTensor("b", mc.TYPE_INT64, (1,)),
]


def _inputs(text: str) -> mc.ModelConfig:
    return text_format.Parse(f'name: "m" {text}', mc.ModelConfig())


def _complete(config: mc.ModelConfig, refuse: bool = True) -> None:
    complete_tensors(
        config.input, FOUND, kind="input", where="m", origin="in the model", refuse_conflicts=refuse
    )


def test_an_empty_list_takes_every_tensor_and_a_declared_one_only_fills_blanks() -> None:
    empty = _inputs("")
    _complete(empty)
    assert [(t.name, t.data_type, list(t.dims)) for t in empty.input] == [
        ("a", mc.TYPE_FP32, [3, -1]),
        ("b", mc.TYPE_INT64, [1]),
    ]
    subset = _inputs('input [{ name: "b" }]')
    _complete(subset)
    assert [(t.name, t.data_type, list(t.dims)) for t in subset.input] == [
        ("b", mc.TYPE_INT64, [1])
    ]


def test_a_variable_dim_on_either_side_fits_and_a_reshape_is_left_alone() -> None:
    config = _inputs('input [{ name: "a" data_type: TYPE_FP32 dims: [-1, 7] }]')
    _complete(config)
    reshaped = _inputs('input [{ name: "b" dims: [1, 1] reshape { shape: [1] } }]')
    _complete(reshaped)
    assert list(reshaped.input[0].dims) == [1, 1]


def test_a_contradiction_is_refused_naming_the_tensor_where_the_backend_checks() -> None:
    config = _inputs('input [{ name: "a" data_type: TYPE_FP16 dims: [3, 8] }]')
    with pytest.raises(ServeError, match="input 'a' has data_type TYPE_FP16 in the config but"):
        _complete(config)
    dims = _inputs('input [{ name: "a" data_type: TYPE_FP32 dims: [4, 8] }]')
    with pytest.raises(ServeError, match=r"has dims \[4, 8\] in the config but \[3, -1\] in the"):
        _complete(dims)
    _complete(_inputs('input [{ name: "a" data_type: TYPE_FP16 dims: [4, 8] }]'), refuse=False)
