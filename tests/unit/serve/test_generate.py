"""The generate extension's mapping, as tritonserver 2.51 maps a body (read off it with a
python model): input keys become tensors of the input's shape (batch 1 for a batching model),
the rest parameters ("parameters" first); answers hold each output by name, one element as
itself, more as a flat list, keys sorted."""

from __future__ import annotations

import json

import numpy as np
import pytest

from protocol.metadata import TensorMetadata
from serve.errors import ServeError
from serve.generate import generate_answer, generate_request
from serve.inference import InferResponse, OutputTensor

UNBATCHED = [TensorMetadata("text_input", "BYTES", [1]), TensorMetadata("max_tokens", "INT32", [1])]
BATCHED = [TensorMetadata("text_input", "BYTES", [-1, 1]), TensorMetadata("ids", "INT64", [-1, -1])]


def _body(**document: object) -> bytes:
    return json.dumps(document).encode()


def test_input_keys_become_tensors_and_the_rest_parameters_in_tritons_order() -> None:
    body = _body(text_input="hello", max_tokens=5, parameters={"temperature": 0.5}, extra="x")
    request = generate_request("gen", "", UNBATCHED, body)
    assert request.inputs["text_input"].tolist() == [b"hello"]
    assert request.inputs["max_tokens"].dtype == np.int32
    assert request.inputs["max_tokens"].tolist() == [5]
    assert request.input_datatypes == {"text_input": "BYTES", "max_tokens": "INT32"}
    assert list(request.parameters.items()) == [("temperature", 0.5), ("extra", "x")]


def test_a_batching_model_gets_a_batch_of_one_and_a_variable_dim_takes_the_rest() -> None:
    request = generate_request("g", "", BATCHED, _body(text_input=["a"], ids=[1, 2, 3]))
    assert request.inputs["text_input"].shape == (1, 1)
    assert request.inputs["ids"].shape == (1, 3)


def test_a_value_that_does_not_fill_the_shape_is_refused_in_tritons_words() -> None:
    with pytest.raises(ServeError) as error:
        generate_request("gen", "", UNBATCHED, _body(text_input="hi", max_tokens=[1, 2]))
    assert str(error.value) == (
        "The schema can not convert input 'max_tokens' to tensor with proper shape"
    )
    for bad, says in (
        (b"{bad", "failed to parse the request JSON buffer"),
        (b"[1]", "must be a JSON object"),
        (_body(text_input="a", parameters=[1]), "'parameters' must be a JSON object"),
        (_body(text_input="a", extra={"x": 1}), "parameter 'extra' must be a string"),
        (_body(text_input=3), "input 'text_input' is BYTES: give text"),
    ):
        with pytest.raises(ServeError, match=says):
            generate_request("gen", "", UNBATCHED, bad)


def test_the_answer_holds_each_output_by_name_keys_sorted() -> None:
    response = InferResponse(
        "gen",
        "1",
        [
            OutputTensor("text_output", "BYTES", np.array([b"caf\xc3\xa9"], dtype=object)),
            OutputTensor("count", "INT32", np.array([[0, 1]], dtype=np.int32)),
        ],
    )
    assert generate_answer(response) == (
        '{"count":[0,1],"model_name":"gen","model_version":"1","text_output":"café"}'.encode()
    )
