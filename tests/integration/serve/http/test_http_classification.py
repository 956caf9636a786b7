"""The classification extension over HTTP, with Triton's own client, on the bundled digits model."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator

import httpx
import numpy as np
import orjson
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import BUNDLED_REPOSITORY
from tests.support.server_process import RunningServer, start_server, stop_server

DIGITS = BUNDLED_REPOSITORY / "digits"
LABELS = (DIGITS / "labels.txt").read_text().splitlines()

# digits without batching: one image in, one [1, 10] row of logits out.
DIGITS_FLAT_CONFIG = """\
name: "digits_flat"
platform: "onnxruntime_onnx"
max_batch_size: 0
input [ { name: "input" data_type: TYPE_FP32 dims: [ 1, 1, 8, 8 ] } ]
output [ { name: "logits" data_type: TYPE_FP32 dims: [ 1, 10 ] label_filename: "labels.txt" } ]
"""

ECHO_BYTES_CONFIG = """\
name: "echo_bytes"
backend: "python"
max_batch_size: 4
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ 2 ] } ]
output [ { name: "ECHO" data_type: TYPE_STRING dims: [ 2 ] } ]
"""

ECHO_BYTES_MODEL = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            out = pb_utils.Tensor("ECHO", text)
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("classification")
    repository = root / "repository"
    shutil.copytree(DIGITS, repository / "digits")  # the committed config and labels.txt
    flat = repository / "digits_flat"
    shutil.copytree(DIGITS / "1", flat / "1")
    shutil.copy(DIGITS / "labels.txt", flat / "labels.txt")
    (flat / "config.pbtxt").write_text(DIGITS_FLAT_CONFIG)
    echo = repository / "echo_bytes"
    (echo / "1").mkdir(parents=True)
    (echo / "1" / "model.py").write_text(ECHO_BYTES_MODEL)
    (echo / "config.pbtxt").write_text(ECHO_BYTES_CONFIG)
    unlabelled = repository / "digits_unlabelled"  # its config names a labels.txt it lacks
    shutil.copytree(DIGITS / "1", unlabelled / "1")
    config = (DIGITS / "config.pbtxt").read_text().replace('"digits"', '"digits_unlabelled"')
    (unlabelled / "config.pbtxt").write_text(config)
    loaded = ("digits", "digits_flat", "echo_bytes")
    control = ["--model-control-mode", "explicit"]
    for name in loaded:
        control += ["--load-model", name]
    running = start_server(repository, root / "server.log", *control)
    try:
        yield running
    finally:
        stop_server(running)


@pytest.fixture(scope="module")
def client(server: RunningServer) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(server.url)


def _images(count: int) -> np.ndarray:
    data = json.loads((DIGITS / "validation.json").read_text())["data"][:count]
    return np.stack(
        [np.asarray(d["input"]["content"], np.float32).reshape(d["input"]["shape"]) for d in data]
    )


def _infer(
    client: httpclient.InferenceServerClient,
    images: np.ndarray,
    output: httpclient.InferRequestedOutput,
    model: str = "digits",
) -> httpclient.InferResult:
    tensor = httpclient.InferInput("input", list(images.shape), "FP32")
    tensor.set_data_from_numpy(images)
    return client.infer(model, [tensor], outputs=[output])


def _expected(row: np.ndarray, count: int) -> list[bytes]:
    """Triton's text for the top `count` of one row: value (6 decimals), index, label."""
    order = np.argsort(-row, kind="stable")[:count]
    return [f"{float(row[i]):f}:{i}:{LABELS[i]}".encode() for i in order]


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_top3_matches_the_raw_logits_and_the_labels(
    client: httpclient.InferenceServerClient, binary: bool
) -> None:
    images = _images(6)
    raw = _infer(client, images, httpclient.InferRequestedOutput("logits")).as_numpy("logits")
    assert raw.shape == (6, 10) and raw.dtype == np.float32

    requested = httpclient.InferRequestedOutput("logits", binary_data=binary, class_count=3)
    result = _infer(client, images, requested)
    output = result.get_output("logits")
    assert output["datatype"] == "BYTES" and output["shape"] == [6, 3]
    assert ("binary_data_size" in output.get("parameters", {})) is binary
    classes = result.as_numpy("logits")
    assert classes.shape == (6, 3)
    # tritonclient gives bytes for binary BYTES outputs and str for JSON ones (as with Triton).
    got = [[t if binary else t.encode() for t in row] for row in classes.tolist()]
    assert all(type(t) is (bytes if binary else str) for t in classes.reshape(-1).tolist())
    assert got == [_expected(row, 3) for row in raw]
    tops = [int(row[0].split(b":")[1]) for row in got]
    assert tops == raw.argmax(axis=1).tolist()
    assert [row[0].split(b":")[2].decode() for row in got] == [LABELS[i] for i in tops]


def test_class_count_above_the_classes_returns_all_ten(
    client: httpclient.InferenceServerClient,
) -> None:
    images = _images(2)
    raw = _infer(client, images, httpclient.InferRequestedOutput("logits")).as_numpy("logits")
    requested = httpclient.InferRequestedOutput("logits", class_count=25)
    classes = _infer(client, images, requested).as_numpy("logits")
    assert classes.shape == (2, 10)
    assert classes.tolist() == [_expected(row, 10) for row in raw]


def test_non_batching_model_returns_one_row_of_classes(
    client: httpclient.InferenceServerClient,
) -> None:
    image = _images(1)  # [1, 1, 8, 8]: the whole non-batched input
    raw = _infer(client, image, httpclient.InferRequestedOutput("logits"), "digits_flat")
    requested = httpclient.InferRequestedOutput("logits", class_count=2)
    result = _infer(client, image, requested, "digits_flat")
    assert result.get_output("logits")["shape"] == [2]
    assert result.as_numpy("logits").tolist() == _expected(raw.as_numpy("logits")[0], 2)


def _post(server: RunningServer, model: str, body: object) -> httpx.Response:
    return httpx.post(
        f"{server.base}/v2/models/{model}/infer", content=orjson.dumps(body), timeout=30
    )


def _digits_body(parameters: dict[str, object]) -> dict[str, object]:
    image = _images(1)
    return {
        "inputs": [
            {
                "name": "input",
                "shape": [1, 1, 8, 8],
                "datatype": "FP32",
                "data": image.ravel().tolist(),
            }
        ],
        "outputs": [{"name": "logits", "parameters": parameters}],
    }


def test_plain_json_request_gets_a_json_bytes_tensor(server: RunningServer) -> None:
    response = _post(server, "digits", _digits_body({"classification": 2}))
    assert response.status_code == 200, response.text
    assert "inference-header-content-length" not in response.headers
    (output,) = response.json()["outputs"]
    assert output["name"] == "logits" and output["datatype"] == "BYTES"
    assert output["shape"] == [1, 2]
    assert len(output["data"]) == 2
    value, index, label = output["data"][0].split(":")
    assert LABELS[int(index)] == label and float(value) >= float(output["data"][1].split(":")[0])


@pytest.mark.parametrize("value", [0, -1, 2.5, "3", True, None])
def test_invalid_class_count_is_a_400_naming_the_output(
    server: RunningServer, value: object
) -> None:
    response = _post(server, "digits", _digits_body({"classification": value}))
    assert response.status_code == 400, response.text
    message = response.json()["error"]
    assert "'logits'" in message and "classification" in message


def test_tritonclient_sees_the_400(client: httpclient.InferenceServerClient) -> None:
    requested = httpclient.InferRequestedOutput("logits", class_count=-2)
    with pytest.raises(InferenceServerException) as caught:
        _infer(client, _images(1), requested)
    assert caught.value.status() == "400"
    assert "'logits'" in caught.value.message()


def test_a_bytes_output_cannot_be_classified(server: RunningServer) -> None:
    body = {
        "inputs": [{"name": "TEXT", "shape": [1, 2], "datatype": "BYTES", "data": ["a", "b"]}],
        "outputs": [{"name": "ECHO", "parameters": {"classification": 1}}],
    }
    response = _post(server, "echo_bytes", body)
    assert response.status_code == 400, response.text
    message = response.json()["error"]
    assert "'ECHO'" in message and "BYTES" in message
    body["outputs"] = [{"name": "ECHO"}]  # the model itself serves
    assert _post(server, "echo_bytes", body).json()["outputs"][0]["data"] == ["a", "b"]


def test_config_shows_the_label_file(client: httpclient.InferenceServerClient) -> None:
    config = client.get_model_config("digits")
    assert config["output"][0]["label_filename"] == "labels.txt"


def test_a_missing_label_file_fails_the_load(server: RunningServer) -> None:
    response = httpx.post(f"{server.base}/v2/repository/models/digits_unlabelled/load", timeout=60)
    assert response.status_code == 400
    assert "labels.txt" in response.json()["error"]
