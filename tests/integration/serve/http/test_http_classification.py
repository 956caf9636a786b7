"""The classification extension's HTTP side on the bundled digits model: classes asked for as
JSON come back as a JSON BYTES tensor of str, and the classification parameter's JSON types.
(What every transport does alike: tests/integration/serve/contract/test_classification.py.)"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator

import httpx
import numpy as np
import orjson
import pytest
import tritonclient.http as httpclient

from tests.conftest import BUNDLED_REPOSITORY
from tests.support.server_process import RunningServer, start_server, stop_server

DIGITS = BUNDLED_REPOSITORY / "digits"
LABELS = (DIGITS / "labels.txt").read_text().splitlines()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("classification")
    shutil.copytree(DIGITS, root / "repository" / "digits")  # the committed config and labels.txt
    running = start_server(root / "repository", root / "server.log")
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
) -> httpclient.InferResult:
    tensor = httpclient.InferInput("input", list(images.shape), "FP32")
    tensor.set_data_from_numpy(images)
    return client.infer("digits", [tensor], outputs=[output])


def _expected(row: np.ndarray, count: int) -> list[bytes]:
    """Triton's text for the top `count` of one row: value (6 decimals), index, label."""
    order = np.argsort(-row, kind="stable")[:count]
    return [f"{float(row[i]):f}:{i}:{LABELS[i]}".encode() for i in order]


def test_top3_as_json_is_a_json_bytes_tensor_of_str(
    client: httpclient.InferenceServerClient,
) -> None:
    images = _images(6)
    raw = _infer(client, images, httpclient.InferRequestedOutput("logits")).as_numpy("logits")
    assert raw.shape == (6, 10) and raw.dtype == np.float32

    requested = httpclient.InferRequestedOutput("logits", binary_data=False, class_count=3)
    result = _infer(client, images, requested)
    output = result.get_output("logits")
    assert output["datatype"] == "BYTES" and output["shape"] == [6, 3]
    assert "binary_data_size" not in output.get("parameters", {})
    classes = result.as_numpy("logits")
    assert classes.shape == (6, 3)
    # tritonclient gives str for JSON BYTES outputs (bytes for binary ones, as with Triton).
    assert all(type(t) is str for t in classes.reshape(-1).tolist())
    assert [[t.encode() for t in row] for row in classes.tolist()] == [
        _expected(row, 3) for row in raw
    ]


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
