"""The classification extension on the bundled digits model: the top classes as Triton writes
them ("value:index:label"), checked against the raw logits and the model's labels.txt."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from serve.errors import ErrorKind
from tests.integration.serve.contract.clients import ContractClient, ContractError
from tests.integration.serve.contract.support import assert_still_serving, digits_images


def _labels(repository: Path) -> list[str]:
    return (repository / "digits" / "labels.txt").read_text().splitlines()


def expected_classes(row: np.ndarray, count: int, labels: list[str]) -> list[bytes]:
    """Triton's text for the top `count` of one row: value (6 decimals), index, label."""
    order = np.argsort(-row, kind="stable")[:count]
    return [f"{float(row[i]):f}:{i}:{labels[i]}".encode() for i in order]


def _raw_and_classes(
    client: ContractClient, repository: Path, images: np.ndarray, class_count: int
) -> tuple[np.ndarray, np.ndarray, list[int]]:
    raw = client.infer("digits", {"input": images}, ["logits"]).outputs["logits"].array
    classes = client.infer("digits", {"input": images}, ["logits"], class_count=class_count)
    output = classes.outputs["logits"]
    assert output.datatype == "BYTES"
    assert output.shape == list(output.array.shape)
    return raw, output.array, output.shape


def test_top3_matches_the_raw_logits_and_the_labels(
    client: ContractClient, repository_copy: Path
) -> None:
    images, _ = digits_images(repository_copy / "digits", 6)
    labels = _labels(repository_copy)
    raw, classes, shape = _raw_and_classes(client, repository_copy, images, 3)
    assert shape == [6, 3]
    assert classes.tolist() == [expected_classes(row, 3, labels) for row in raw]
    tops = [int(row[0].split(b":")[1]) for row in classes.tolist()]
    assert tops == raw.argmax(axis=1).tolist()


def test_class_count_above_the_classes_returns_all_ten(
    client: ContractClient, repository_copy: Path
) -> None:
    images, _ = digits_images(repository_copy / "digits", 2)
    raw, classes, shape = _raw_and_classes(client, repository_copy, images, 25)
    assert shape == [2, 10]
    assert classes.tolist() == [expected_classes(row, 10, _labels(repository_copy)) for row in raw]


@pytest.mark.parametrize("class_count", [-1, -2])
def test_a_negative_class_count_is_invalid_naming_the_output(
    client: ContractClient, repository_copy: Path, class_count: int
) -> None:
    images, _ = digits_images(repository_copy / "digits", 1)
    with pytest.raises(ContractError) as caught:
        client.infer("digits", {"input": images}, ["logits"], class_count=class_count)
    assert caught.value.means(ErrorKind.INVALID_ARGUMENT), caught.value
    assert "'logits'" in caught.value.message and "classification" in caught.value.message
    assert_still_serving(client)
