"""Model names and load files that would lead out of the repository are refused before they
touch the disk, over HTTP and gRPC, naming the problem; a refused load leaves no scratch
folder behind, and the server keeps serving.

The repository sits beside a folder `outside` holding a valid model: a name that walked out of
the repository would load it."""

from __future__ import annotations

import base64
import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.conftest import BUNDLED_REPOSITORY
from tests.support.server_process import RunningServer, start_server, stop_server


@dataclass
class Setup:
    server: RunningServer
    scratch: Path  # the server's TMPDIR


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("traversal")
    repository = root / "repository"
    shutil.copytree(BUNDLED_REPOSITORY / "simple", repository / "simple")
    shutil.copytree(BUNDLED_REPOSITORY / "simple", root / "outside")
    scratch = root / "tmp"
    scratch.mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TMPDIR", str(scratch))
        running = start_server(
            repository,
            root / "server.log",
            "--model-control-mode",
            "explicit",
            "--load-model",
            "simple",
        )
    try:
        yield Setup(running, scratch)
    finally:
        stop_server(running)


def _loaded_names(server: RunningServer) -> set[str]:
    """The models ready (a refused upload may stay in the index, UNAVAILABLE with its reason)."""
    index = httpx.post(f"{server.base}/v2/repository/index", json={"ready": True}).json()
    return {entry["name"] for entry in index}


# (name as sent in the URL, the part of the message that names the problem)
HTTP_NAMES = [
    ("%2E%2E", "'..' is not a model folder"),
    ("%2E", "'.' is not a model folder"),
    (".hidden", "starts with '.'"),
    ("a%00b", "NUL"),
    ("back%5Cslash", "backslash"),
]


@pytest.mark.parametrize(("name", "problem"), HTTP_NAMES)
def test_http_load_of_a_name_leading_out_is_refused(setup: Setup, name: str, problem: str) -> None:
    response = httpx.post(f"{setup.server.base}/v2/repository/models/{name}/load", json={})
    assert response.status_code == 400, response.text
    assert problem in response.json()["error"]
    assert _loaded_names(setup.server) == {"simple"}


def test_http_name_with_an_encoded_slash_reaches_no_model(setup: Setup) -> None:
    response = httpx.post(f"{setup.server.base}/v2/repository/models/..%2Foutside/load", json={})
    assert response.status_code in (400, 404), response.text
    assert _loaded_names(setup.server) == {"simple"}


@pytest.mark.parametrize(
    ("name", "problem"),
    [("..", "not a model folder"), ("../outside", "holds a '/'"), ("/etc", "holds a '/'")],
)
def test_grpc_load_and_unload_of_a_name_leading_out_are_refused(
    setup: Setup, name: str, problem: str
) -> None:
    client = grpcclient.InferenceServerClient(setup.server.grpc_url)
    with pytest.raises(InferenceServerException) as loading:
        client.load_model(name)
    assert problem in loading.value.message()
    assert loading.value.status() == "StatusCode.INVALID_ARGUMENT"
    with pytest.raises(InferenceServerException) as unloading:
        client.unload_model(name)
    assert problem in unloading.value.message()
    assert client.is_model_ready("simple")
    assert _loaded_names(setup.server) == {"simple"}


def test_version_that_is_no_number_is_refused(setup: Setup) -> None:
    for version in ("-1", "%201", "1_0"):
        response = httpx.get(f"{setup.server.base}/v2/models/simple/versions/{version}")
        assert response.status_code == 400, (version, response.text)
        assert "is not a version number" in response.json()["error"]


def _file_load(server: RunningServer, files: dict[str, bytes]) -> httpx.Response:
    config = httpx.get(f"{server.base}/v2/models/simple/config").json()
    config["name"] = "uploaded"
    parameters = {"config": json.dumps(config)}
    for path, content in files.items():
        parameters[f"file:{path}"] = base64.b64encode(content).decode()
    return httpx.post(
        f"{server.base}/v2/repository/models/uploaded/load", json={"parameters": parameters}
    )


MODEL = (BUNDLED_REPOSITORY / "simple" / "1" / "model.onnx").read_bytes()


@pytest.mark.parametrize(
    ("files", "problem"),
    [
        ({".": MODEL}, "a '.' part"),
        ({"..": MODEL}, "a '..' part"),
        ({"1/../../escape.onnx": MODEL}, "a '..' part"),
        ({"/tmp/escape.onnx": MODEL}, "is absolute"),
        ({"1//model.onnx": MODEL}, "an empty part"),
        ({"1/model.onnx": MODEL, "1/model.onnx/inner": MODEL}, "both a file and a folder"),
        ({"1/" + "A" * 256: MODEL}, "a part longer than 255 bytes"),
    ],
)
def test_load_files_leading_out_are_refused_and_leave_nothing(
    setup: Setup, files: dict[str, bytes], problem: str
) -> None:
    before = sorted(setup.scratch.iterdir())
    response = _file_load(setup.server, files)
    # as tritonserver answers a load whose files cannot be written: 500, a poll failure
    assert response.status_code == 500, response.text
    assert (
        "failed to load 'uploaded', failed to poll from model repository"
        in response.json()["error"]
    )
    assert problem in response.json()["error"]
    assert sorted(setup.scratch.iterdir()) == before
    assert _loaded_names(setup.server) == {"simple"}
    assert not (setup.scratch.parent / "escape.onnx").exists()


def test_a_valid_upload_still_loads_and_unloads_without_a_trace(setup: Setup) -> None:
    before = sorted(setup.scratch.iterdir())
    response = _file_load(setup.server, {"1/model.onnx": MODEL})
    assert response.status_code == 200, response.text
    assert "uploaded" in _loaded_names(setup.server)
    unloaded = httpx.post(f"{setup.server.base}/v2/repository/models/uploaded/unload", json={})
    assert unloaded.status_code == 200, unloaded.text
    assert sorted(setup.scratch.iterdir()) == before
