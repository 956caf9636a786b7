"""Inference on the bundled models, the same over every transport; expected values come from
the models themselves (numpy for simple's add/sub, onnxruntime on the model file)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.integration.serve.contract.clients import ContractClient
from tests.integration.serve.contract.support import digits_images, onnx_reference, simple_inputs


def test_simple_adds_and_subtracts_int32(client: ContractClient) -> None:
    inputs = simple_inputs(1, batch=3)
    answer = client.infer("simple", inputs, ["OUTPUT0", "OUTPUT1"], request_id="req-simple")
    assert (answer.model_name, answer.model_version, answer.id) == ("simple", "1", "req-simple")
    a, b = inputs["INPUT0"], inputs["INPUT1"]
    for name, expected in (("OUTPUT0", a + b), ("OUTPUT1", a - b)):
        output = answer.outputs[name]
        assert (output.datatype, output.shape) == ("INT32", [3, 16])
        np.testing.assert_array_equal(output.array, expected)


def test_a_named_version_answers_as_that_version(client: ContractClient) -> None:
    inputs = simple_inputs(2)
    answer = client.infer("simple", inputs, ["OUTPUT1"], version="1")
    assert answer.model_version == "1"
    np.testing.assert_array_equal(
        answer.outputs["OUTPUT1"].array, inputs["INPUT0"] - inputs["INPUT1"]
    )


@pytest.mark.parametrize("requested", [["OUTPUT1"], ["OUTPUT0"], ["OUTPUT1", "OUTPUT0"]])
def test_only_the_requested_outputs_come_back(client: ContractClient, requested: list[str]) -> None:
    inputs = simple_inputs(3, batch=2)
    answer = client.infer("simple", inputs, requested)
    assert sorted(answer.outputs) == sorted(requested)
    expected = {
        "OUTPUT0": inputs["INPUT0"] + inputs["INPUT1"],
        "OUTPUT1": inputs["INPUT0"] - inputs["INPUT1"],
    }
    for name in requested:
        np.testing.assert_array_equal(answer.outputs[name].array, expected[name])


def test_every_output_when_none_is_requested(client: ContractClient) -> None:
    inputs = simple_inputs(4)
    answer = client.infer("simple", inputs)
    assert sorted(answer.outputs) == ["OUTPUT0", "OUTPUT1"]
    np.testing.assert_array_equal(
        answer.outputs["OUTPUT0"].array, inputs["INPUT0"] + inputs["INPUT1"]
    )


def test_python_backend_adds_and_subtracts_fp32(client: ContractClient) -> None:
    rng = np.random.default_rng(5)
    a = rng.random((2, 16), dtype=np.float32)
    b = rng.random((2, 16), dtype=np.float32)
    answer = client.infer("add_sub_py", {"INPUT0": a, "INPUT1": b}, ["OUTPUT0", "OUTPUT1"])
    assert answer.outputs["OUTPUT0"].datatype == "FP32"
    np.testing.assert_allclose(answer.outputs["OUTPUT0"].array, a + b, rtol=1e-6)
    np.testing.assert_allclose(answer.outputs["OUTPUT1"].array, a - b, rtol=1e-6)


def test_digits_matches_onnxruntime(client: ContractClient, repository_copy: Path) -> None:
    images, labels = digits_images(repository_copy / "digits", 5)
    answer = client.infer("digits", {"input": images}, ["logits"])
    logits = answer.outputs["logits"]
    assert (logits.datatype, logits.shape) == ("FP32", [5, 10])
    expected = onnx_reference(repository_copy / "digits", {"input": images})["logits"]
    np.testing.assert_allclose(logits.array, expected, rtol=1e-4, atol=1e-5)
    assert logits.array.argmax(axis=1).tolist() == labels


def test_resnet18_matches_onnxruntime(client: ContractClient, repository_copy: Path) -> None:
    image = np.random.default_rng(6).random((1, 3, 224, 224), dtype=np.float32)
    answer = client.infer("resnet18", {"input": image}, ["logits"])
    expected = onnx_reference(repository_copy / "resnet18", {"input": image})["logits"]
    assert answer.outputs["logits"].shape == [1, 1000]
    np.testing.assert_allclose(answer.outputs["logits"].array, expected, rtol=1e-3, atol=1e-4)
