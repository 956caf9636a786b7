"""A BYTES model (python backend echo) and a model without batching, built for the suite: what
the bundled models do not cover."""

from __future__ import annotations

import numpy as np
import pytest

from serve.errors import ErrorKind
from tests.conftest import BUNDLED_REPOSITORY
from tests.integration.serve.contract.clients import ContractClient, ContractError
from tests.integration.serve.contract.support import assert_still_serving, digits_images
from tests.integration.serve.contract.test_classification import expected_classes
from tests.support.server_process import RunningServer

DIGITS = BUNDLED_REPOSITORY / "digits"


@pytest.fixture(scope="module")
def server(explicit_server: RunningServer) -> RunningServer:
    return explicit_server


def test_bytes_tensors_round_trip(client: ContractClient) -> None:
    text = np.array([[b"hello", b""], ["zürich".encode(), bytes(range(256))]], dtype=np.object_)
    answer = client.infer("echo_bytes", {"TEXT": text}, ["ECHO"])
    echo = answer.outputs["ECHO"]
    assert (echo.datatype, echo.shape) == ("BYTES", [2, 2])
    assert echo.array.tolist() == text.tolist()


def test_bytes_metadata(client: ContractClient) -> None:
    metadata = client.model_metadata("echo_bytes")
    assert [(t.name, t.datatype, list(t.shape)) for t in metadata.inputs] == [
        ("TEXT", "BYTES", [-1, 2])
    ]


def test_a_bytes_output_cannot_be_classified(client: ContractClient) -> None:
    text = np.array([[b"a", b"b"]], dtype=np.object_)
    with pytest.raises(ContractError) as caught:
        client.infer("echo_bytes", {"TEXT": text}, ["ECHO"], class_count=1)
    assert caught.value.means(ErrorKind.INVALID_ARGUMENT), caught.value
    assert "'ECHO'" in caught.value.message and "BYTES" in caught.value.message
    assert_still_serving(client)


def test_unbatched_model_shows_no_batch_dimension(client: ContractClient) -> None:
    metadata = client.model_metadata("digits_flat")
    assert [list(t.shape) for t in metadata.inputs] == [[1, 1, 8, 8]]
    assert client.model_config("digits_flat").max_batch_size == 0


def test_unbatched_model_classifies_its_one_row(client: ContractClient) -> None:
    image, _ = digits_images(DIGITS, 1)  # [1, 1, 8, 8]: the whole non-batched input
    raw = client.infer("digits_flat", {"input": image}, ["logits"]).outputs["logits"]
    assert raw.shape == [1, 10]
    classes = client.infer("digits_flat", {"input": image}, ["logits"], class_count=2)
    output = classes.outputs["logits"]
    assert (output.datatype, output.shape) == ("BYTES", [2])
    labels = (DIGITS / "labels.txt").read_text().splitlines()
    assert output.array.tolist() == expected_classes(raw.array[0], 2, labels)
