"""The control plane's routes: health, metadata, config, statistics and the repository
extension answer with Triton's status codes and JSON bodies."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from serve.repository.manager import ControlMode
from tests.inprocess.conftest import asgi_client_for

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
async def explicit_client(repository_copy: Path) -> AsyncIterator[httpx.AsyncClient]:
    """The bundled repository in explicit control mode with nothing loaded."""
    async with asgi_client_for(repository_copy, ControlMode.EXPLICIT) as client:
        yield client


async def test_health_and_server_metadata(asgi_client: httpx.AsyncClient) -> None:
    for path in ("/v2/health/live", "/v2/health/ready", "/v2/models/simple/ready"):
        response = await asgi_client.get(path)
        assert (response.status_code, response.content) == (200, b""), path
    metadata = (await asgi_client.get("/v2")).json()
    assert metadata["name"] == "autotune"
    assert {"binary_tensor_data", "statistics", "model_repository"} <= set(metadata["extensions"])


async def test_model_metadata_and_config(asgi_client: httpx.AsyncClient) -> None:
    for path in ("/v2/models/simple", "/v2/models/simple/versions/1"):
        response = await asgi_client.get(path)
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/json"
        metadata = response.json()
        assert metadata["name"] == "simple" and metadata["versions"] == ["1"]
        assert [(t["name"], t["datatype"], t["shape"]) for t in metadata["inputs"]] == [
            ("INPUT0", "INT32", [-1, 16]),
            ("INPUT1", "INT32", [-1, 16]),
        ]
    config = (await asgi_client.get("/v2/models/simple/config")).json()
    assert config == (await asgi_client.get("/v2/models/simple/versions/1/config")).json()
    assert config["name"] == "simple" and config["max_batch_size"] == 8
    assert [t["name"] for t in config["output"]] == ["OUTPUT0", "OUTPUT1"]


async def test_statistics_bodies(asgi_client: httpx.AsyncClient) -> None:
    one = (await asgi_client.get("/v2/models/simple/stats")).json()["model_stats"]
    assert [(s["name"], s["version"]) for s in one] == [("simple", "1")]
    assert set(one[0]["inference_stats"]) >= {"success", "fail", "queue", "compute_infer"}
    every = (await asgi_client.get("/v2/models/stats")).json()["model_stats"]
    assert {s["name"] for s in every} == {"simple", "digits", "resnet18", "add_sub_py"}
    missing = await asgi_client.get("/v2/models/nope/stats")
    assert missing.status_code == 404 and "nope" in missing.json()["error"]


async def test_repository_index(asgi_client: httpx.AsyncClient) -> None:
    index = (await asgi_client.post("/v2/repository/index")).json()
    assert {e["name"]: e["state"] for e in index} == {
        n: "READY" for n in ("add_sub_py", "digits", "resnet18", "simple")
    }
    ready = (await asgi_client.post("/v2/repository/index", json={"ready": True})).json()
    assert {e["name"] for e in ready} == {e["name"] for e in index}
    malformed = await asgi_client.post("/v2/repository/index", content=b"[1, 2]")
    assert malformed.status_code == 400 and "JSON object" in malformed.json()["error"]


async def test_none_mode_refuses_repository_changes(asgi_client: httpx.AsyncClient) -> None:
    response = await asgi_client.post("/v2/repository/models/simple/unload")
    assert response.status_code == 400
    assert "explicit" in response.json()["error"]


async def test_load_unknown_model_is_an_error(explicit_client: httpx.AsyncClient) -> None:
    response = await explicit_client.post("/v2/repository/models/nope/load")
    assert response.status_code == 404
    assert "nope" in response.json()["error"]


async def test_explicit_mode_starts_with_nothing_loaded(explicit_client: httpx.AsyncClient) -> None:
    assert (await explicit_client.get("/v2/health/ready")).status_code == 200
    assert (await explicit_client.get("/v2/models/simple/ready")).status_code == 400
    infer = await explicit_client.post("/v2/models/simple/infer", json={"inputs": []})
    assert infer.status_code == 404 and "'simple'" in infer.json()["error"]
    index = (await explicit_client.post("/v2/repository/index")).json()
    bundled = {"add_sub_py", "digits", "resnet18", "simple"}
    assert [e for e in index if e["name"] in bundled] == [{"name": n} for n in sorted(bundled)]
