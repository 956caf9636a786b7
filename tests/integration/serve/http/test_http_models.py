"""Every bundled model over HTTP with Triton's own client: health, metadata, config, infer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support.server_process import RunningServer


@pytest.fixture(scope="module")
def client(server: RunningServer) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(server.url, concurrency=4)


def _infer(
    client: httpclient.InferenceServerClient,
    model: str,
    arrays: dict[str, np.ndarray],
    outputs: list[str],
    binary: bool,
    request_id: str = "",
) -> httpclient.InferResult:
    inputs = []
    for name, array in arrays.items():
        datatype = {"float32": "FP32", "int32": "INT32"}[str(array.dtype)]
        tensor = httpclient.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array, binary_data=binary)
        inputs.append(tensor)
    requested = [httpclient.InferRequestedOutput(n, binary_data=binary) for n in outputs]
    return client.infer(model, inputs, outputs=requested, request_id=request_id)


def _onnx_reference(repository: Path, model: str, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(str(repository / model / "1" / "model.onnx"))
    return list(session.run(None, feeds))


def test_server_health_and_metadata(client: httpclient.InferenceServerClient) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    metadata = client.get_server_metadata()
    assert metadata["name"] == "autotune"
    assert "binary_tensor_data" in metadata["extensions"]
    assert "statistics" in metadata["extensions"]


@pytest.mark.parametrize("model", ["simple", "digits", "resnet18", "add_sub_py"])
def test_model_ready_metadata_and_config(
    client: httpclient.InferenceServerClient, model: str
) -> None:
    assert client.is_model_ready(model)
    assert client.is_model_ready(model, "1")
    metadata = client.get_model_metadata(model)
    config = client.get_model_config(model)
    assert metadata["name"] == model and metadata["versions"] == ["1"]
    assert config["name"] == model
    assert config["max_batch_size"] > 0
    names = [t["name"] for t in config["input"]]
    assert [t["name"] for t in metadata["inputs"]] == names
    for tensor in metadata["inputs"]:
        assert tensor["shape"][0] == -1  # batching models show the batch dimension


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_simple_add_sub(client: httpclient.InferenceServerClient, binary: bool) -> None:
    rng = np.random.default_rng(1)
    a = rng.integers(-1000, 1000, size=(3, 16), dtype=np.int32)
    b = rng.integers(-1000, 1000, size=(3, 16), dtype=np.int32)
    result = _infer(
        client,
        "simple",
        {"INPUT0": a, "INPUT1": b},
        ["OUTPUT0", "OUTPUT1"],
        binary,
        request_id="req-simple",
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    assert result.get_response()["id"] == "req-simple"


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_add_sub_python(client: httpclient.InferenceServerClient, binary: bool) -> None:
    rng = np.random.default_rng(2)
    a = rng.random((2, 16), dtype=np.float32)
    b = rng.random((2, 16), dtype=np.float32)
    result = _infer(
        client, "add_sub_py", {"INPUT0": a, "INPUT1": b}, ["OUTPUT0", "OUTPUT1"], binary
    )
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b, rtol=1e-6)
    np.testing.assert_allclose(result.as_numpy("OUTPUT1"), a - b, rtol=1e-6)


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_digits_matches_onnxruntime(
    client: httpclient.InferenceServerClient, repository_copy: Path, binary: bool
) -> None:
    from sklearn.datasets import load_digits

    images = (load_digits().images[:5] / 16.0).astype(np.float32).reshape(5, 1, 8, 8)
    result = _infer(client, "digits", {"input": images}, ["logits"], binary)
    (expected,) = _onnx_reference(repository_copy, "digits", {"input": images})
    np.testing.assert_allclose(result.as_numpy("logits"), expected, rtol=1e-4, atol=1e-5)
    assert result.as_numpy("logits").argmax(axis=1).tolist() == load_digits().target[:5].tolist()


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_resnet18_matches_onnxruntime(
    client: httpclient.InferenceServerClient, repository_copy: Path, binary: bool
) -> None:
    image = np.random.default_rng(3).random((1, 3, 224, 224), dtype=np.float32)
    result = _infer(client, "resnet18", {"input": image}, ["logits"], binary)
    (expected,) = _onnx_reference(repository_copy, "resnet18", {"input": image})
    np.testing.assert_allclose(result.as_numpy("logits"), expected, rtol=1e-3, atol=1e-4)


def test_every_output_without_requested_outputs(client: httpclient.InferenceServerClient) -> None:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    tensor0 = httpclient.InferInput("INPUT0", [1, 16], "INT32")
    tensor0.set_data_from_numpy(a)
    tensor1 = httpclient.InferInput("INPUT1", [1, 16], "INT32")
    tensor1.set_data_from_numpy(a)
    result = client.infer("simple", [tensor0, tensor1])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a * 2)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a * 0)


def test_statistics_count_requests(client: httpclient.InferenceServerClient) -> None:
    before = client.get_inference_statistics("simple")["model_stats"][0]
    a = np.ones((2, 16), dtype=np.int32)
    for _ in range(3):
        _infer(client, "simple", {"INPUT0": a, "INPUT1": a}, ["OUTPUT0"], True)
    after = client.get_inference_statistics("simple")["model_stats"][0]
    stats = after["inference_stats"]
    assert stats["success"]["count"] - before["inference_stats"]["success"]["count"] == 3
    assert after["inference_count"] - before["inference_count"] == 6
    for field in ("queue", "compute_input", "compute_infer", "compute_output"):
        assert stats[field]["count"] == stats["success"]["count"]
        assert stats[field]["ns"] > 0
    assert any(entry["batch_size"] == 2 for entry in after["batch_stats"])
    every = client.get_inference_statistics()
    assert {s["name"] for s in every["model_stats"]} >= {"simple", "digits", "add_sub_py"}


def test_repository_index_lists_models(client: httpclient.InferenceServerClient) -> None:
    index = client.get_model_repository_index()
    states = {entry["name"]: entry.get("state") for entry in index}
    assert states == {n: "READY" for n in ("add_sub_py", "digits", "resnet18", "simple")}


def test_tritonclient_sees_clear_errors(server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(server.url)
    tensor = httpclient.InferInput("INPUT0", [1, 16], "INT32")
    tensor.set_data_from_numpy(np.ones((1, 16), dtype=np.int32))
    with pytest.raises(InferenceServerException, match="INPUT1"):
        client.infer("simple", [tensor])
    with pytest.raises(InferenceServerException, match="unknown model"):
        client.get_model_metadata("nope")
