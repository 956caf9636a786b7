"""Bad requests get an error of the expected kind whose message names the model, version,
tensor or field at fault, over every transport, and the server keeps serving after each."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

from serve.errors import ErrorKind
from tests.integration.serve.contract.clients import ContractClient, ContractError
from tests.integration.serve.contract.support import assert_still_serving, simple_inputs

ONES = np.ones((1, 16), dtype=np.int32)


@dataclass(frozen=True)
class Case:
    inputs: dict[str, np.ndarray]
    kind: ErrorKind
    mentions: str  # what the message must name
    model: str = "simple"
    version: str = ""
    outputs: list[str] | None = None


INFER_CASES = {
    "unknown model": Case(simple_inputs(1), ErrorKind.NOT_FOUND, "nope", model="nope"),
    "unknown version": Case(simple_inputs(1), ErrorKind.NOT_FOUND, "7", version="7"),
    "wrong datatype": Case(
        {"INPUT0": ONES.astype(np.float32), "INPUT1": ONES}, ErrorKind.INVALID_ARGUMENT, "INPUT0"
    ),
    "wrong shape": Case(
        {"INPUT0": ONES[:, :15], "INPUT1": ONES}, ErrorKind.INVALID_ARGUMENT, "INPUT0"
    ),
    "missing input": Case({"INPUT0": ONES}, ErrorKind.INVALID_ARGUMENT, "INPUT1"),
    "unknown input": Case(
        {"INPUT0": ONES, "INPUT1": ONES, "INPUT9": ONES}, ErrorKind.INVALID_ARGUMENT, "INPUT9"
    ),
    "unknown output": Case(
        simple_inputs(1), ErrorKind.INVALID_ARGUMENT, "OUTPUT7", outputs=["OUTPUT7"]
    ),
    "batch over max_batch_size": Case(
        simple_inputs(1, batch=9), ErrorKind.INVALID_ARGUMENT, "batch-size must be <= 8"
    ),
}


@pytest.mark.parametrize("case", list(INFER_CASES))
def test_bad_infer_is_refused_and_the_server_keeps_serving(
    client: ContractClient, case: str
) -> None:
    bad = INFER_CASES[case]
    with pytest.raises(ContractError) as caught:
        client.infer(bad.model, bad.inputs, bad.outputs, version=bad.version)
    assert caught.value.means(bad.kind), caught.value
    assert bad.mentions in caught.value.message, caught.value
    assert_still_serving(client)


CONTROL_CASES: dict[str, tuple[Callable[[ContractClient], object], str]] = {
    "metadata of an unknown model": (lambda c: c.model_metadata("nope"), "nope"),
    "metadata of an unknown version": (lambda c: c.model_metadata("simple", "9"), "9"),
    "config of an unknown model": (lambda c: c.model_config("nope"), "nope"),
    "statistics of an unknown model": (lambda c: c.statistics("nope"), "nope"),
}


@pytest.mark.parametrize("case", list(CONTROL_CASES))
def test_unknown_model_or_version_is_not_found(client: ContractClient, case: str) -> None:
    call, mentions = CONTROL_CASES[case]
    with pytest.raises(ContractError) as caught:
        call(client)
    assert caught.value.means(ErrorKind.NOT_FOUND), caught.value
    assert mentions in caught.value.message, caught.value
    assert_still_serving(client)


def test_none_mode_refuses_repository_changes(client: ContractClient) -> None:
    for change in (client.unload, client.load):
        with pytest.raises(ContractError) as caught:
            change("simple")
        assert caught.value.means(ErrorKind.UNSUPPORTED), caught.value
        assert "explicit" in caught.value.message, caught.value
    assert client.model_ready("simple")
    assert_still_serving(client)
