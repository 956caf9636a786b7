"""Restricted APIs with Triton's own clients, on both front ends of each transport: the
repository and shared-memory APIs answer only callers presenting the key (HTTP 403, gRPC
PERMISSION_DENIED with Triton's message otherwise); the APIs left open answer everyone."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import BUNDLED_REPOSITORY
from tests.support.server_process import RunningServer, serving

KEY = {"admin-key": "s3cret"}
WRONG = {"admin-key": "guess"}
REFUSAL = "This API is restricted, expecting header 'admin-key'"
FRONT_ENDS = {
    "native": (),
    "uvicorn+grpcio": ("--http-front-end", "uvicorn", "--grpc-front-end", "grpcio"),
}


@pytest.fixture(scope="module", params=list(FRONT_ENDS))
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("restricted")
    shutil.copytree(BUNDLED_REPOSITORY / "simple", root / "repository" / "simple")
    with serving(
        root / "repository",
        root / "server.log",
        "--model-control-mode",
        "explicit",
        "--load-model",
        "simple",
        "--http-restricted-api",
        "model-repository,shared-memory:admin-key=s3cret",
        "--grpc-restricted-protocol",
        "model-repository,shared-memory:admin-key=s3cret",
        *FRONT_ENDS[request.param],
    ) as running:
        yield running


def _http_infer(client: httpclient.InferenceServerClient) -> list[list[int]]:
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = httpclient.InferInput(name, [1, 16], "INT32")
        tensor.set_data_from_numpy(np.ones((1, 16), np.int32))
        inputs.append(tensor)
    return client.infer("simple", inputs).as_numpy("OUTPUT0").tolist()


def test_http_restricted_apis_need_the_key(server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(server.url)
    try:
        for headers in (None, WRONG):
            with pytest.raises(InferenceServerException) as refused:
                client.get_model_repository_index(headers=headers)
            assert REFUSAL in refused.value.message()
            assert refused.value.status() == "403"
            with pytest.raises(InferenceServerException) as refused:
                client.unload_model("simple", headers=headers)
            assert REFUSAL in refused.value.message()
            with pytest.raises(InferenceServerException) as refused:
                client.get_system_shared_memory_status(headers=headers)
            assert REFUSAL in refused.value.message()
        assert client.is_model_ready("simple")  # the refused unloads did nothing
        index = client.get_model_repository_index(headers=KEY)
        assert [entry["name"] for entry in index] == ["simple"]
        assert client.get_system_shared_memory_status(headers=KEY) == []
        # open APIs answer without the key
        assert client.is_server_live() and client.get_model_metadata("simple")["name"] == "simple"
        assert _http_infer(client) == [[2] * 16]
    finally:
        client.close()


def test_grpc_restricted_apis_need_the_key(server: RunningServer) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        for headers in (None, WRONG):
            with pytest.raises(InferenceServerException) as refused:
                client.get_model_repository_index(headers=headers)
            assert refused.value.status() == "StatusCode.PERMISSION_DENIED"
            assert REFUSAL in refused.value.message()
            with pytest.raises(InferenceServerException) as refused:
                client.unload_model("simple", headers=headers)
            assert refused.value.status() == "StatusCode.PERMISSION_DENIED"
            with pytest.raises(InferenceServerException) as refused:
                client.get_system_shared_memory_status(headers=headers)
            assert refused.value.status() == "StatusCode.PERMISSION_DENIED"
        assert client.is_model_ready("simple")
        index = client.get_model_repository_index(headers=KEY)
        assert [model.name for model in index.models] == ["simple"]
        client.get_system_shared_memory_status(headers=KEY)
        assert client.is_server_live()
        inputs = []
        for name in ("INPUT0", "INPUT1"):
            tensor = grpcclient.InferInput(name, [1, 16], "INT32")
            tensor.set_data_from_numpy(np.ones((1, 16), np.int32))
            inputs.append(tensor)
        assert client.infer("simple", inputs).as_numpy("OUTPUT0").tolist() == [[2] * 16]
    finally:
        client.close()


def test_a_malformed_restriction_stops_the_server_with_a_usage_error(tmp_path: Path) -> None:
    shutil.copytree(BUNDLED_REPOSITORY / "simple", tmp_path / "repository" / "simple")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "serve",
            "--model-repository",
            str(tmp_path / "repository"),
            "--http-restricted-api",
            "repository:admin-key=x",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "--http-restricted-api 'repository:admin-key=x': unknown API 'repository'" in (
        result.stderr
    )
