"""Every failed load says "failed to load '<name>'", as Triton words it and its clients (the
model-control examples among them) match on; the server keeps serving after each. A load that
fails before any version loads (a malformed override, no such model, a config that cannot
load) is answered as tritonserver 2.51 answers it: INTERNAL (HTTP 500), "failed to load
'<name>', failed to poll from model repository", followed here by the reason."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import httpx
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import BUNDLED_REPOSITORY
from tests.support.server_process import RunningServer, start_server, stop_server

SIMPLE = """name: "simple"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [{ name: "INPUT0" data_type: TYPE_INT32 dims: [16] },
       { name: "INPUT1" data_type: TYPE_INT32 dims: [16] }]
output [{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [16] },
        { name: "OUTPUT1" data_type: TYPE_INT32 dims: [16] }]
"""
BROKEN = """name: "broken"
platform: "onnxruntime_onnx"
max_batch_size: 4
dynamic_batching { preferred_batch_size: [16] }
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("load_failures")
    repository = root / "repository"
    for name, config in (("simple", SIMPLE), ("broken", BROKEN)):
        shutil.copytree(BUNDLED_REPOSITORY / "simple" / "1", repository / name / "1")
        (repository / name / "config.pbtxt").write_text(config)
    running = start_server(
        repository,
        root / "server.log",
        "--model-control-mode",
        "explicit",
        "--load-model",
        "simple",
    )
    try:
        yield running
    finally:
        stop_server(running)


POLL_FAILURE = "failed to poll from model repository"

# (model, load keyword arguments): a malformed config override, a model that does not exist,
# a model whose config cannot load
FAILURES = [
    ("simple", {"config": '"parameters": {"config": {{"max_batch_size": "16"}}}'}),
    ("missing", {}),
    ("broken", {}),
]


@pytest.mark.parametrize(("model", "kwargs"), FAILURES)
def test_failed_loads_say_so_over_http(server: RunningServer, model: str, kwargs: dict) -> None:
    client = httpclient.InferenceServerClient(server.url)
    with pytest.raises(InferenceServerException) as caught:
        client.load_model(model, **kwargs)
    assert f"failed to load '{model}', {POLL_FAILURE}" in caught.value.message()
    assert caught.value.status() == "500"
    assert client.is_model_ready("simple")


@pytest.mark.parametrize(("model", "kwargs"), FAILURES)
def test_failed_loads_say_so_over_grpc(server: RunningServer, model: str, kwargs: dict) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    with pytest.raises(InferenceServerException) as caught:
        client.load_model(model, **kwargs)
    assert f"failed to load '{model}', {POLL_FAILURE}" in caught.value.message()
    assert caught.value.status() == "StatusCode.INTERNAL"
    assert client.is_model_ready("simple")


def test_an_unknown_load_parameter_fails_the_load(server: RunningServer) -> None:
    response = httpx.post(
        f"{server.base}/v2/repository/models/simple/load",
        json={"parameters": {"colour": "red"}},
    )
    assert response.status_code == 400
    assert "failed to load 'simple'" in response.json()["error"]
    assert "'colour'" in response.json()["error"]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_unloading_a_model_never_loaded_succeeds_as_in_tritonserver(
    server: RunningServer, protocol: str
) -> None:
    if protocol == "http":
        client = httpclient.InferenceServerClient(server.url)
    else:
        client = grpcclient.InferenceServerClient(server.grpc_url)
    client.unload_model("missing")  # in no repository
    client.unload_model("broken")  # in the repository, never loaded
    assert client.is_model_ready("simple")
