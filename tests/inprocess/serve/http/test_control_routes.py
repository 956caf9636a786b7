"""The control plane's HTTP side: empty health bodies, JSON content, the routes with and without
a version, the repository index's request body, the readiness route's status. (What every
transport does alike is the contract suite's: tests/integration/serve/contract/.)"""

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
    response = await asgi_client.get("/v2")
    assert response.headers["content-type"] == "application/json"
    assert response.json()["name"] == "autotune"


async def test_model_metadata_and_config(asgi_client: httpx.AsyncClient) -> None:
    for path in ("/v2/models/simple", "/v2/models/simple/versions/1"):
        response = await asgi_client.get(path)
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/json"
        assert response.json()["name"] == "simple"
    config = (await asgi_client.get("/v2/models/simple/config")).json()
    assert config == (await asgi_client.get("/v2/models/simple/versions/1/config")).json()
    assert config["name"] == "simple"


async def test_repository_index(asgi_client: httpx.AsyncClient) -> None:
    index = (await asgi_client.post("/v2/repository/index")).json()
    ready = (await asgi_client.post("/v2/repository/index", json={"ready": True})).json()
    assert {e["name"] for e in ready} == {e["name"] for e in index}
    malformed = await asgi_client.post("/v2/repository/index", content=b"[1, 2]")
    assert malformed.status_code == 400 and "JSON object" in malformed.json()["error"]


async def test_explicit_mode_index_entries_without_state(
    explicit_client: httpx.AsyncClient,
) -> None:
    assert (await explicit_client.get("/v2/health/ready")).status_code == 200
    assert (await explicit_client.get("/v2/models/simple/ready")).status_code == 400
    index = (await explicit_client.post("/v2/repository/index")).json()
    bundled = {"add_sub_py", "digits", "resnet18", "simple"}
    # a model never loaded has no state: the JSON entry carries its name alone
    assert [e for e in index if e["name"] in bundled] == [{"name": n} for n in sorted(bundled)]
