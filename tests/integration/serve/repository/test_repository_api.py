"""The model repository extension: explicit load (with a config override), unload, index."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import BUNDLED_REPOSITORY
from tests.integration.conftest import RepositoryFactory
from tests.support.server_process import start_server, stop_server


def _simple_config() -> str:
    return "# from: simple\n" + (BUNDLED_REPOSITORY / "simple" / "config.pbtxt").read_text()


@pytest.fixture
def explicit_server(make_repository: RepositoryFactory, tmp_path: Path):
    repository = make_repository(
        {
            "simple": _simple_config(),
            "other": _simple_config().replace('name: "simple"', 'name: "other"'),
        }
    )
    running = start_server(
        repository,
        tmp_path / "server.log",
        "--model-control-mode",
        "explicit",
        "--load-model",
        "simple",
    )
    try:
        yield running
    finally:
        stop_server(running)


def test_explicit_mode_loads_only_named_models(explicit_server) -> None:
    client = httpclient.InferenceServerClient(explicit_server.url)
    assert client.is_model_ready("simple")
    assert not client.is_model_ready("other")
    index = {e["name"]: e for e in client.get_model_repository_index()}
    assert index["simple"]["state"] == "READY"
    assert "state" not in index["other"] or index["other"]["state"] != "READY"
    client.load_model("other")
    assert client.is_model_ready("other")
    client.unload_model("other")
    assert not client.is_model_ready("other")
    index = {e["name"]: e for e in client.get_model_repository_index()}
    assert index["other"]["state"] == "UNAVAILABLE"
    assert index["other"]["reason"] == "unloaded"


def test_load_with_config_override(explicit_server) -> None:
    client = httpclient.InferenceServerClient(explicit_server.url)
    config = client.get_model_config("simple")
    config["dynamic_batching"]["max_queue_delay_microseconds"] = 1234
    config["instance_group"] = [{"count": 2, "kind": "KIND_CPU"}]
    client.load_model("simple", config=json.dumps(config))
    reloaded = client.get_model_config("simple")
    assert reloaded["dynamic_batching"]["max_queue_delay_microseconds"] == 1234
    assert reloaded["instance_group"][0]["count"] == 2


def test_bad_override_keeps_previous_version_serving(explicit_server) -> None:
    client = httpclient.InferenceServerClient(explicit_server.url)
    config = client.get_model_config("simple")
    config["dynamic_batching"]["preferred_batch_size"] = [64]
    with pytest.raises(InferenceServerException, match="preferred_batch_size"):
        client.load_model("simple", config=json.dumps(config))
    assert client.is_model_ready("simple")
    assert client.get_model_config("simple")["dynamic_batching"]["preferred_batch_size"] == []
