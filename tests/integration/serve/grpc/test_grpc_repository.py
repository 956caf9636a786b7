"""The model repository extension over gRPC under --model-control-mode explicit: index, load
(with a config override, and with the model's files sent as raw bytes), unload."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from google.protobuf import json_format
from tritonclient.utils import InferenceServerException

from tests.conftest import BUNDLED_REPOSITORY
from tests.integration.conftest import RepositoryFactory
from tests.support.server_process import start_server, stop_server


def _simple_config() -> str:
    return "# from: simple\n" + (BUNDLED_REPOSITORY / "simple" / "config.pbtxt").read_text()


@pytest.fixture
def client(
    make_repository: RepositoryFactory, tmp_path: Path
) -> Iterator[grpcclient.InferenceServerClient]:
    repository = make_repository(
        {
            "simple": _simple_config(),
            "other": _simple_config().replace('name: "simple"', 'name: "other"'),
        }
    )
    control = ["--model-control-mode", "explicit", "--load-model", "simple"]
    running = start_server(repository, tmp_path / "server.log", *control)
    try:
        with grpcclient.InferenceServerClient(running.grpc_url) as client:
            yield client
    finally:
        stop_server(running)


def _sum(client: grpcclient.InferenceServerClient, model: str) -> np.ndarray:
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = grpcclient.InferInput(name, [1, 16], "INT32")
        tensor.set_data_from_numpy(np.full((1, 16), 2, np.int32))
        inputs.append(tensor)
    return client.infer(model, inputs).as_numpy("OUTPUT0")


def _index(client: grpcclient.InferenceServerClient) -> dict[str, dict[str, str]]:
    models = client.get_model_repository_index().models
    return {m.name: {"version": m.version, "state": m.state, "reason": m.reason} for m in models}


def test_index_load_and_unload(client: grpcclient.InferenceServerClient) -> None:
    assert client.is_model_ready("simple")
    assert not client.is_model_ready("other")
    index = _index(client)
    assert index["simple"]["state"] == "READY" and index["other"]["state"] != "READY"
    ready = client.get_model_repository_index().models  # ready=False: all of them
    assert {m.name for m in ready} == {"simple", "other"}

    client.load_model("other")
    assert client.is_model_ready("other")
    assert int(_sum(client, "other")[0, 0]) == 4
    client.unload_model("other")
    assert not client.is_model_ready("other")
    assert _index(client)["other"] == {"version": "1", "state": "UNAVAILABLE", "reason": "unloaded"}
    with pytest.raises(InferenceServerException) as info:
        _sum(client, "other")
    assert str(info.value.status()) in ("StatusCode.NOT_FOUND", "StatusCode.UNAVAILABLE")


def test_load_with_a_config_override(client: grpcclient.InferenceServerClient) -> None:
    config = client.get_model_config("simple", as_json=True)["config"]
    config["dynamic_batching"]["max_queue_delay_microseconds"] = 1234
    config["instance_group"] = [{"count": 2, "kind": "KIND_CPU"}]
    client.load_model("simple", config=json.dumps(config))
    reloaded = client.get_model_config("simple").config
    assert reloaded.dynamic_batching.max_queue_delay_microseconds == 1234
    assert reloaded.instance_group[0].count == 2
    assert int(_sum(client, "simple")[0, 0]) == 4


def test_a_bad_override_fails_as_in_tritonserver_and_the_model_keeps_serving(
    client: grpcclient.InferenceServerClient,
) -> None:
    with pytest.raises(InferenceServerException) as info:
        client.load_model("simple", config='{"max_batch_size": "many"}')
    assert str(info.value.status()) == "StatusCode.INTERNAL"
    assert "failed to poll from model repository" in info.value.message()
    assert "max_batch_size" in info.value.message()
    assert client.is_model_ready("simple")
    assert int(_sum(client, "simple")[0, 0]) == 4


def test_load_with_files_sent_as_raw_bytes(client: grpcclient.InferenceServerClient) -> None:
    """gRPC carries a file's contents as bytes_param (HTTP as base64 text)."""
    config = client.get_model_config("simple").config
    config.name = "from_files"
    model = (BUNDLED_REPOSITORY / "simple" / "1" / "model.onnx").read_bytes()
    client.load_model(
        "from_files",
        config=json.dumps(json_format.MessageToDict(config, preserving_proto_field_name=True)),
        files={"file:1/model.onnx": model},
    )
    assert client.is_model_ready("from_files")
    assert int(_sum(client, "from_files")[0, 0]) == 4
