"""The control plane's router: matching, the answers for unknown paths and methods, and errors
mapped once."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from serve.errors import ServeError
from serve.http.router import Answer, ControlRequest, Router, compile_template


def _call(
    router: Router, method: str, path: str, body: bytes = b""
) -> tuple[int, dict[bytes, bytes], bytes]:
    sent: list[dict[str, Any]] = []
    chunks = [
        {"type": "http.request", "body": body[:3], "more_body": True},
        {"type": "http.request", "body": body[3:], "more_body": False},
    ]

    async def receive() -> dict[str, Any]:
        return chunks.pop(0) if chunks else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path}
    asyncio.run(router(scope, receive, send))
    start, body_message = sent
    return start["status"], dict(start["headers"]), body_message["body"]


def _echo(name: str):  # type: ignore[no-untyped-def]
    async def handler(request: ControlRequest) -> Answer:
        content = {"route": name, "params": request.params, "body": request.body.decode()}
        return Answer(200, orjson.dumps(content), b"application/json")

    return handler


@pytest.fixture
def router() -> Router:
    router = Router()
    router.add("GET", "/v2/models/stats", _echo("all stats"))
    router.add("GET", "/v2/models/{model}", _echo("metadata"))
    router.add("GET", "/v2/models/{model}/versions/{version}", _echo("version"))
    router.add("GET POST", "/v2/logging", _echo("logging"))
    router.add("POST", "/v2/repository/models/{model}/load", _echo("load"))
    return router


def test_parameters_are_whole_segments(router: Router) -> None:
    status, _, body = _call(router, "GET", "/v2/models/digits/versions/2")
    assert status == 200
    assert orjson.loads(body)["params"] == {"model": "digits", "version": "2"}
    assert _call(router, "GET", "/v2/models/digits/versions/2/extra")[0] == 404
    assert _call(router, "GET", "/v2/models/")[0] == 404


def test_the_first_route_declared_wins(router: Router) -> None:
    assert orjson.loads(_call(router, "GET", "/v2/models/stats")[2])["route"] == "all stats"
    assert orjson.loads(_call(router, "GET", "/v2/models/statsx")[2])["route"] == "metadata"


def test_the_body_arrives_whole(router: Router) -> None:
    status, _, body = _call(router, "POST", "/v2/repository/models/m/load", b'{"parameters": {}}')
    assert status == 200
    assert orjson.loads(body)["body"] == '{"parameters": {}}'


def test_an_unknown_path_is_404_and_a_known_one_under_another_method_405(router: Router) -> None:
    status, headers, body = _call(router, "GET", "/v2/nothing")
    assert (status, orjson.loads(body)) == (404, {"error": "Not Found"})
    assert headers[b"content-type"] == b"application/json"
    status, headers, body = _call(router, "DELETE", "/v2/logging")
    assert (status, orjson.loads(body)) == (405, {"error": "Method Not Allowed"})
    assert headers[b"allow"] == b"GET, HEAD, POST"


def test_head_is_answered_as_get(router: Router) -> None:
    status, headers, body = _call(router, "HEAD", "/v2/models/digits")
    assert status == 200
    assert int(headers[b"content-length"]) == len(body) > 0


def test_a_serve_error_is_its_status_and_any_other_failure_500() -> None:
    async def missing(_: ControlRequest) -> Answer:
        raise ServeError.not_found("Request for unknown model: 'x' is not found")

    async def broken(_: ControlRequest) -> Answer:
        raise RuntimeError("boom")

    router = Router()
    router.add("GET", "/missing", missing)
    router.add("GET", "/broken", broken)
    status, _, body = _call(router, "GET", "/missing")
    assert (status, orjson.loads(body)["error"]) == (
        404,
        "Request for unknown model: 'x' is not found",
    )
    status, _, body = _call(router, "GET", "/broken")
    assert status == 500
    assert "boom" in orjson.loads(body)["error"]


def test_templates_escape_their_literal_text() -> None:
    pattern = compile_template("/v2/a.b/{name}")
    assert pattern.match("/v2/a.b/x")
    assert not pattern.match("/v2/aXb/x")
