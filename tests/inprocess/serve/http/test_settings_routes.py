"""The trace and logging extensions' HTTP routes: JSON shapes (strings, trace_level a list),
model settings over global ones, null clearing, errors naming the setting. (Trace files and
what logging does are tests/integration/serve/trace/ and test_server_flags.py.)"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.anyio


async def test_trace_settings_as_triton_answers_them(asgi_client: httpx.AsyncClient) -> None:
    response = await asgi_client.get("/v2/trace/setting")
    assert response.status_code == 200
    assert response.json() == {
        "trace_file": "",
        "trace_level": ["OFF"],
        "trace_rate": "1000",
        "trace_count": "-1",
        "log_frequency": "0",
        "trace_mode": "triton",
    }
    assert "trace" in (await asgi_client.get("/v2")).json()["extensions"]


async def test_model_trace_settings_override_and_clear(
    asgi_client: httpx.AsyncClient, tmp_path: Path
) -> None:
    url = "/v2/models/simple/trace/setting"
    changed = await asgi_client.post(url, json={"trace_count": "3", "trace_rate": 7})
    assert changed.status_code == 200
    assert changed.json()["trace_rate"] == "7" and changed.json()["trace_count"] == "3"
    assert (await asgi_client.get(url)).json()["trace_rate"] == "7"
    assert (await asgi_client.get("/v2/trace/setting")).json()["trace_rate"] == "1000"
    cleared = await asgi_client.post(url, json={"trace_count": None, "trace_rate": None})
    assert cleared.json() == (await asgi_client.get("/v2/trace/setting")).json()


@pytest.mark.parametrize("url", ["/v2/trace/setting", "/v2/models/simple/trace/setting"])
async def test_the_trace_file_cannot_be_set_through_the_api(
    asgi_client: httpx.AsyncClient, url: str, tmp_path: Path
) -> None:
    response = await asgi_client.post(url, json={"trace_file": str(tmp_path / "t.json")})
    assert response.status_code == 501
    assert "--trace-config triton,file=PATH" in response.json()["error"]
    assert (await asgi_client.get(url)).json()["trace_file"] == ""


async def test_the_log_file_cannot_be_set_through_the_api(
    asgi_client: httpx.AsyncClient, tmp_path: Path
) -> None:
    response = await asgi_client.post("/v2/logging", json={"log_file": str(tmp_path / "x.log")})
    assert response.status_code == 501
    assert "--log-file" in response.json()["error"]
    assert not (tmp_path / "x.log").exists()


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"trace_level": "LOUD"}, "trace_level"),
        ({"trace_rate": "0"}, "trace_rate"),
        ({"trace_rate": True}, "trace_rate"),
        ({"trace_count": "lots"}, "trace_count"),
        ({"trace_level": ["TIMESTAMPS"]}, "trace_file"),  # tracing needs a file
        ({"sample": "1"}, "sample"),
    ],
)
async def test_bad_trace_settings_are_400_and_named(
    asgi_client: httpx.AsyncClient, body: dict, named: str
) -> None:
    response = await asgi_client.post("/v2/trace/setting", json=body)
    assert response.status_code == 400
    assert f"'{named}'" in response.json()["error"]


async def test_unknown_model_trace_settings_are_404(asgi_client: httpx.AsyncClient) -> None:
    response = await asgi_client.get("/v2/models/missing/trace/setting")
    assert response.status_code == 404
    assert "'missing'" in response.json()["error"]


async def test_log_settings_as_triton_answers_them(asgi_client: httpx.AsyncClient) -> None:
    response = await asgi_client.get("/v2/logging")
    assert response.status_code == 200
    assert set(response.json()) == {
        "log_file",
        "log_info",
        "log_warning",
        "log_error",
        "log_verbose_level",
        "log_format",
    }
    bad = await asgi_client.post("/v2/logging", json={"log_verbose_level": "loud"})
    assert bad.status_code == 400 and "'log_verbose_level'" in bad.json()["error"]
    assert (await asgi_client.get("/v2/logging")).json() == response.json()
