"""The classification extension over gRPC (the output's int64 "classification" parameter), with
Triton's own client, on the bundled digits model and its labels."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.support.server_process import RunningServer


@pytest.fixture(scope="module")
def client(server: RunningServer) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        yield client


@pytest.fixture(scope="module")
def digits(repository_copy: Path) -> Path:
    return repository_copy / "digits"


def _images(digits: Path, count: int) -> np.ndarray:
    data = json.loads((digits / "validation.json").read_text())["data"][:count]
    return np.stack(
        [np.asarray(d["input"]["content"], np.float32).reshape(d["input"]["shape"]) for d in data]
    )


def _infer(
    client: grpcclient.InferenceServerClient,
    images: np.ndarray,
    output: grpcclient.InferRequestedOutput,
) -> grpcclient.InferResult:
    tensor = grpcclient.InferInput("input", list(images.shape), "FP32")
    tensor.set_data_from_numpy(images)
    return client.infer("digits", [tensor], outputs=[output])


def test_top3_matches_the_raw_logits_and_the_labels(
    client: grpcclient.InferenceServerClient, digits: Path
) -> None:
    labels = (digits / "labels.txt").read_text().splitlines()
    images = _images(digits, 5)
    raw = _infer(client, images, grpcclient.InferRequestedOutput("logits")).as_numpy("logits")
    assert raw.shape == (5, 10)

    result = _infer(client, images, grpcclient.InferRequestedOutput("logits", class_count=3))
    output = result.get_output("logits")
    assert output.datatype == "BYTES" and list(output.shape) == [5, 3]
    got = result.as_numpy("logits").tolist()
    expected = []
    for row in raw:
        order = np.argsort(-row, kind="stable")[:3]
        expected.append([f"{float(row[i]):f}:{i}:{labels[i]}".encode() for i in order])
    assert got == expected


def test_an_invalid_class_count_is_invalid_naming_the_output(
    client: grpcclient.InferenceServerClient, digits: Path
) -> None:
    requested = grpcclient.InferRequestedOutput("logits", class_count=-2)
    with pytest.raises(InferenceServerException) as info:
        _infer(client, _images(digits, 1), requested)
    assert str(info.value.status()) == "StatusCode.INVALID_ARGUMENT"
    assert "'logits'" in info.value.message() and "classification" in info.value.message()
