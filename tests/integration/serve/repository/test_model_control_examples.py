"""What Triton's model-control examples (simple_grpc_model_control.py and
simple_http_model_control.py of Triton's client repository) check, step by step, over both
protocols: the index, a load, a malformed config override ("failed to load"), a good one
(max_batch_size 8 -> 16), an unload, a load whose file name has a part longer than NAME_MAX
(answered INTERNAL / 500, "failed to poll from model repository", and the server lives on), and
a load of a model that does not exist ("failed to load")."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import BUNDLED_REPOSITORY
from tests.support.server_process import RunningServer, start_server, stop_server

POLL_FAILURE = "failed to poll from model repository"
OTHERS = ["m2", "m3", "m4"]  # models the index lists (never loaded here)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("model_control")
    repository = root / "repository"
    for name in ["simple", *OTHERS]:
        shutil.copytree(BUNDLED_REPOSITORY / "simple", repository / name)
        config = repository / name / "config.pbtxt"
        config.write_text(config.read_text().replace('"simple"', f'"{name}"'))
    running = start_server(repository, root / "server.log", "--model-control-mode", "explicit")
    try:
        yield running
    finally:
        stop_server(running)


def _client(server: RunningServer, protocol: str) -> httpclient.InferenceServerClient:
    if protocol == "http":
        return httpclient.InferenceServerClient(server.url)
    return grpcclient.InferenceServerClient(server.grpc_url)  # type: ignore[return-value]


def _index_size(client: object) -> int:
    index = client.get_model_repository_index()  # type: ignore[attr-defined]
    return len(index) if isinstance(index, list) else len(index.models)


def _max_batch_size(client: object) -> int:
    config = client.get_model_config("simple")  # type: ignore[attr-defined]
    return config["max_batch_size"] if isinstance(config, dict) else config.config.max_batch_size


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_the_model_control_example_steps(server: RunningServer, protocol: str) -> None:
    client = _client(server, protocol)
    internal = "500" if protocol == "http" else "StatusCode.INTERNAL"
    assert _index_size(client) == 1 + len(OTHERS)
    client.load_model("simple")
    assert client.is_model_ready("simple")

    with pytest.raises(InferenceServerException) as malformed:
        client.load_model("simple", config='"parameters": {"config": {{"max_batch_size": "16"}}}')
    assert "failed to load" in malformed.value.message()
    assert malformed.value.status() == internal

    client.load_model("simple", config='{"max_batch_size":"16"}')
    assert _max_batch_size(client) == 16

    client.unload_model("simple")
    assert not client.is_model_ready("simple")

    with pytest.raises(InferenceServerException) as too_long:
        client.load_model("simple", config="{}", files={"file:" + "A" * 256: b"a"})
    assert too_long.value.status() == internal
    assert POLL_FAILURE in too_long.value.message()
    assert "longer than 255 bytes" in too_long.value.message()  # and why
    assert client.is_server_live()

    with pytest.raises(InferenceServerException) as unknown:
        client.load_model("wrong_model_name")
    assert f"failed to load 'wrong_model_name', {POLL_FAILURE}" in unknown.value.message()
    assert unknown.value.status() == internal
