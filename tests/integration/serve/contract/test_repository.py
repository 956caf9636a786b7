"""The model repository extension in explicit model control mode: index, load (with a config
override), unload; a bad load leaves what was serving as it was."""

from __future__ import annotations

import numpy as np
import pytest
from tritonclient.grpc import model_config_pb2

from serve.errors import ErrorKind
from tests.integration.serve.contract.clients import ContractClient, ContractError
from tests.integration.serve.contract.conftest import EXPLICIT_LOADED, UNLOADED_COPIES
from tests.integration.serve.contract.support import assert_still_serving, simple_inputs
from tests.support.server_process import RunningServer


@pytest.fixture(scope="module")
def server(explicit_server: RunningServer) -> RunningServer:
    return explicit_server


def _states(client: ContractClient) -> dict[str, tuple[str, str]]:
    return {m.name: (m.state, m.reason) for m in client.repository_index()}


def test_index_lists_every_model_and_only_the_named_ones_are_loaded(
    client: ContractClient,
) -> None:
    states = _states(client)
    assert set(states) == {*EXPLICIT_LOADED, *UNLOADED_COPIES.values(), "digits_unlabelled"}
    for name in EXPLICIT_LOADED:
        assert states[name] == ("READY", ""), name
        assert client.model_ready(name)
    other = UNLOADED_COPIES[client.transport]
    assert states[other] == ("", "")  # never loaded: no state yet
    assert not client.model_ready(other)


def test_load_then_unload(client: ContractClient) -> None:
    other = UNLOADED_COPIES[client.transport]
    with pytest.raises(ContractError) as caught:
        client.infer(other, simple_inputs(1))
    assert caught.value.means(ErrorKind.NOT_FOUND), caught.value
    assert f"'{other}'" in caught.value.message
    client.load(other)
    assert client.model_ready(other)
    assert _states(client)[other] == ("READY", "")
    inputs = simple_inputs(2)
    answer = client.infer(other, inputs, ["OUTPUT0"])
    expected = inputs["INPUT0"] + inputs["INPUT1"]
    np.testing.assert_array_equal(answer.outputs["OUTPUT0"].array, expected)
    client.unload(other)
    assert not client.model_ready(other)
    assert _states(client)[other] == ("UNAVAILABLE", "unloaded")
    with pytest.raises(ContractError) as caught:  # unloaded: there, but not serving
        client.infer(other, inputs)
    assert caught.value.means(ErrorKind.UNAVAILABLE), caught.value
    assert f"'{other}'" in caught.value.message and "unloaded" in caught.value.message
    assert_still_serving(client)


def test_load_with_config_override(client: ContractClient) -> None:
    config = client.model_config("simple")
    config.dynamic_batching.max_queue_delay_microseconds = 1234
    del config.instance_group[:]
    config.instance_group.add(count=2, kind=model_config_pb2.ModelInstanceGroup.KIND_CPU)
    client.load("simple", config)
    try:
        reloaded = client.model_config("simple")
        assert reloaded.dynamic_batching.max_queue_delay_microseconds == 1234
        assert [g.count for g in reloaded.instance_group] == [2]
        assert_still_serving(client)
    finally:
        client.load("simple")  # back to the config file
    assert client.model_config("simple").dynamic_batching.max_queue_delay_microseconds == 0


def test_bad_override_keeps_the_previous_model_serving(client: ContractClient) -> None:
    config = client.model_config("simple")
    config.dynamic_batching.preferred_batch_size.append(64)  # over max_batch_size 8
    with pytest.raises(ContractError) as caught:
        client.load("simple", config)
    # as tritonserver answers a config it cannot poll: INTERNAL (500), then why
    assert caught.value.means(ErrorKind.INTERNAL), caught.value
    assert "failed to load 'simple', failed to poll from model repository" in caught.value.message
    assert "preferred_batch_size" in caught.value.message
    assert client.model_ready("simple")
    assert list(client.model_config("simple").dynamic_batching.preferred_batch_size) == []
    assert_still_serving(client)


def test_loading_an_unknown_model_fails_as_in_tritonserver(client: ContractClient) -> None:
    with pytest.raises(ContractError) as caught:
        client.load("nope")
    assert caught.value.means(ErrorKind.INTERNAL), caught.value
    assert "failed to load 'nope', failed to poll from model repository" in caught.value.message
    assert "no such model" in caught.value.message
    assert "nope" not in _states(client)  # a failed lookup adds nothing to the index
    assert_still_serving(client)


def test_a_missing_label_file_fails_the_load_naming_it(client: ContractClient) -> None:
    with pytest.raises(ContractError) as caught:
        client.load("digits_unlabelled")
    assert caught.value.means(ErrorKind.INVALID_ARGUMENT), caught.value
    assert "labels.txt" in caught.value.message
    state, reason = _states(client)["digits_unlabelled"]
    assert state == "UNAVAILABLE" and "labels.txt" in reason
    assert_still_serving(client)
