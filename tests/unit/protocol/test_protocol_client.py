"""The protocol's HTTP client: server addresses, infer request framing, error bodies, and the
control calls (async and blocking) against a scripted server."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import httptools
import orjson
import pytest

from protocol.client import BlockingClient
from protocol.client.http import Endpoint, HttpClient, build_infer_request, error_message, parse_url
from protocol.errors import ClientError


def test_parse_url() -> None:
    assert parse_url("localhost:8000") == Endpoint("localhost", 8000)
    assert parse_url("http://10.0.0.1:9000/") == Endpoint("10.0.0.1", 9000)
    assert parse_url("myhost") == Endpoint("myhost", 8000)
    assert parse_url("[::1]:8001").address == "[::1]:8001"
    with pytest.raises(ClientError, match="HTTPS is not supported"):
        parse_url("https://host:443")
    with pytest.raises(ClientError, match="not a valid server address"):
        parse_url("host:notaport")


# framing and responses


class _Request:
    def __init__(self) -> None:
        self.headers: dict[str, str] = {}
        self.body = b""
        self.url = b""

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode().lower()] = value.decode()

    def on_body(self, body: bytes) -> None:
        self.body += body


def test_infer_request_framing() -> None:
    request = build_infer_request(
        Endpoint("127.0.0.1", 8000), "my model", "2", b"{}0123", 2, {"X-Key": "v"}
    )
    parsed = _Request()
    parser = httptools.HttpRequestParser(parsed)
    parser.feed_data(request)
    assert parser.get_method() == b"POST"
    assert parsed.url == b"/v2/models/my%20model/versions/2/infer"
    assert parsed.headers["host"] == "127.0.0.1:8000"
    assert parsed.headers["inference-header-content-length"] == "2"
    assert parsed.headers["content-length"] == "6"
    assert parsed.headers["content-type"] == "application/octet-stream"
    assert parsed.headers["x-key"] == "v"
    assert parsed.body == b"{}0123"
    json_only = build_infer_request(Endpoint("h", 1), "m", "", b"{}", None)
    assert json_only.startswith(b"POST /v2/models/m/infer HTTP/1.1\r\n")
    assert b"Inference-Header-Content-Length" not in json_only


def test_error_message() -> None:
    assert error_message(400, b'{"error":"bad input"}') == "bad input"
    assert error_message(502, b"Bad Gateway") == "HTTP 502: Bad Gateway"
    assert error_message(500, b"") == "HTTP 500"


# control calls against a scripted server


class _ScriptedServer:
    """An HTTP/1.1 server on a loopback port answering each request from `answer`, and
    remembering (method, path, body) of each."""

    def __init__(self, answers: dict[str, tuple[int, bytes]]) -> None:
        self.answers = answers
        self.seen: list[tuple[str, str, bytes]] = []
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.port = 0

    def __enter__(self) -> _ScriptedServer:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *_: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self) -> None:
        server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ")
            headers = dict(line.split(": ", 1) for line in lines[1:] if line)
            body = await reader.readexactly(int(headers.get("Content-Length", "0")))
            self.seen.append((method, path, body))
            status, answer = self.answers.get(path, (404, b'{"error":"no such route"}'))
            writer.write(
                f"HTTP/1.1 {status} X\r\nContent-Length: {len(answer)}\r\n\r\n".encode() + answer
            )
            await writer.drain()


@pytest.fixture
def scripted() -> Iterator[_ScriptedServer]:
    answers = {
        "/v2": (200, b'{"name":"s"}'),
        "/v2/models/m/config": (200, b'{"max_batch_size":8}'),
        "/v2/models/nope": (404, b'{"error":"unknown model: \'nope\'"}'),
        "/v2/models/m/stats": (200, b"[1]"),
        "/v2/repository/models/m/load": (200, b""),
        "/v2/repository/models/bad/load": (400, b'{"error":"bad config"}'),
        "/v2/repository/index": (200, b'[{"name":"m","state":"READY"}]'),
    }
    with _ScriptedServer(answers) as server:
        yield server


def test_async_control_calls_share_one_connection(scripted: _ScriptedServer) -> None:
    async def calls() -> None:
        client = HttpClient(f"127.0.0.1:{scripted.port}")
        try:
            assert await client.server_metadata() == {"name": "s"}
            assert await client.model_config("m") == {"max_batch_size": 8}
            with pytest.raises(ClientError, match="model 'nope' is not known") as known:
                await client.model_metadata("nope")
            assert known.value.status == 404
            with pytest.raises(ClientError, match="with a JSON list, not an object"):
                await client.statistics("m")
            assert await client.repository_index() == [{"name": "m", "state": "READY"}]
        finally:
            await client.close()

    asyncio.run(calls())
    assert [seen[:2] for seen in scripted.seen] == [
        ("GET", "/v2"),
        ("GET", "/v2/models/m/config"),
        ("GET", "/v2/models/nope"),
        ("GET", "/v2/models/m/stats"),
        ("POST", "/v2/repository/index"),
    ]


def test_blocking_load_sends_parameters_and_carries_the_refusal(
    scripted: _ScriptedServer,
) -> None:
    client = BlockingClient(f"127.0.0.1:{scripted.port}", timeout_s=10)
    client.load_model("m", {"config": '{"max_batch_size": 4}'})
    assert scripted.seen[-1] == (
        "POST",
        "/v2/repository/models/m/load",
        orjson.dumps({"parameters": {"config": '{"max_batch_size": 4}'}}),
    )
    with pytest.raises(ClientError) as refused:
        client.load_model("bad")
    assert (str(refused.value), refused.value.status) == ("bad config", 400)
    assert client.model_config("m") == {"max_batch_size": 8}


def test_unreachable_server_is_a_client_error_without_status() -> None:
    with pytest.raises(ClientError, match=r"cannot reach the server at 127\.0\.0\.1:1") as failed:
        BlockingClient("127.0.0.1:1").server_metadata()
    assert failed.value.status is None
