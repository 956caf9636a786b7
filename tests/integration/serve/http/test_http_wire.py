"""HTTP/1.1 on the wire against a real server, for both front ends (--http-front-end): pipelined
requests answered in order when a later one completes first, `Expect: 100-continue` (libcurl
sends it for larger bodies), chunked request bodies, `Connection: close`, HTTP/1.0, and a
malformed request answered 400 before the server closes."""

from __future__ import annotations

import shutil
import socket
from collections.abc import Iterator

import numpy as np
import orjson
import pytest

from tests.conftest import BUNDLED_REPOSITORY
from tests.support.raw_http import (
    binary_infer,
    http_request,
    json_infer,
    read_responses,
    split_binary_response,
)
from tests.support.server_process import RunningServer, connect, serving

A = np.arange(16, dtype=np.int32).reshape(1, 16)
B = np.full((1, 16), 3, dtype=np.int32)


@pytest.fixture(scope="module", params=["native", "uvicorn"])
def front_end(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def server(front_end: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp(f"wire-{front_end}")
    shutil.copytree(BUNDLED_REPOSITORY / "simple", root / "repository" / "simple")
    with serving(
        root / "repository", root / "server.log", "--http-front-end", front_end
    ) as running:
        yield running


def _read_until_closed(sock: socket.socket) -> bytes:
    """What the server still sends before it closes (b"" if it closes at once)."""
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk


def _read_head(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(1)
        if not chunk:
            break
        data += chunk
    return data


def _sums(response_body: bytes) -> list[int]:
    outputs = orjson.loads(response_body)["outputs"]
    return list(outputs[0]["data"])


def test_pipelined_answers_keep_request_order(server: RunningServer) -> None:
    # The statistics request is answered by the control plane on a later loop pass than the
    # inferences after it, the unknown model's error at once: the answers must still come back
    # in request order.
    requests = [
        http_request("GET", "/v2/models/simple/stats"),
        json_infer("simple", "one", {"INPUT0": A, "INPUT1": B}),
        json_infer("missing", "two", {"INPUT0": A, "INPUT1": B}),
        binary_infer("simple", "three", {"INPUT0": B, "INPUT1": B}),
        http_request("GET", "/v2/health/ready"),
    ]
    with connect(server) as sock:
        sock.sendall(b"".join(requests))
        responses = read_responses(sock, len(requests))
    assert [r.complete for r in responses] == [True] * 5, responses
    assert [r.status for r in responses] == [200, 200, 404, 200, 200], responses
    assert b"model_stats" in responses[0].body
    assert orjson.loads(responses[1].body)["id"] == "one"
    assert b"missing" in responses[2].body
    header, blob = split_binary_response(responses[3])
    assert header["id"] == "three"
    assert np.frombuffer(blob[:64], "<i4").tolist() == (B + B).ravel().tolist()
    assert responses[4].body == b""
    assert all(r.headers["content-length"] == str(len(r.body)) for r in responses)


def test_expect_100_continue_is_answered_before_the_body(server: RunningServer) -> None:
    request = json_infer("simple", "continued", {"INPUT0": A, "INPUT1": B})
    head, body = request.split(b"\r\n\r\n", 1)
    with connect(server) as sock:
        sock.sendall(head + b"\r\nExpect: 100-continue\r\n\r\n")
        interim = _read_head(sock)  # the server must answer before the body is sent
        assert interim.startswith(b"HTTP/1.1 100 "), interim
        sock.sendall(body)
        (response,) = read_responses(sock, 1)
    assert response.complete and response.status == 200, response
    assert _sums(response.body) == (A + B).ravel().tolist()


def test_chunked_request_body(server: RunningServer) -> None:
    request = binary_infer("simple", "chunked", {"INPUT0": A, "INPUT1": A})
    head, body = request.split(b"\r\n\r\n", 1)
    lines = [line for line in head.split(b"\r\n") if not line.startswith(b"Content-Length")]
    chunks = [body[i : i + 50] for i in range(0, len(body), 50)]
    with connect(server) as sock:
        sock.sendall(b"\r\n".join([*lines, b"Transfer-Encoding: chunked"]) + b"\r\n\r\n")
        for chunk in chunks:
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        sock.sendall(b"0\r\n\r\n")
        (response,) = read_responses(sock, 1)
    assert response.complete and response.status == 200, response
    header, blob = split_binary_response(response)
    assert header["id"] == "chunked"
    assert np.frombuffer(blob[:64], "<i4").tolist() == (A + A).ravel().tolist()


def test_connection_close_is_answered_then_closed(server: RunningServer) -> None:
    request = json_infer("simple", "last", {"INPUT0": A, "INPUT1": B})
    head, body = request.split(b"\r\n\r\n", 1)
    with connect(server) as sock:
        sock.sendall(head + b"\r\nConnection: close\r\n\r\n" + body)
        (response,) = read_responses(sock, 1)
        rest = _read_until_closed(sock)
    assert response.complete and response.status == 200, response
    assert response.headers.get("connection") == "close"
    assert rest == b""


def test_http_1_0_request_is_answered_and_closed(server: RunningServer) -> None:
    with connect(server) as sock:
        sock.sendall(b"GET /v2/health/live HTTP/1.0\r\n\r\n")
        data = _read_until_closed(sock)
    assert data.split(b"\r\n", 1)[0] in (b"HTTP/1.1 200 OK", b"HTTP/1.0 200 OK"), data
    assert b"content-length: 0" in data.lower()


def test_malformed_request_is_answered_400_and_closed(server: RunningServer) -> None:
    with connect(server) as sock:
        sock.sendall(b"NOT AN HTTP REQUEST\r\n\r\n")
        responses = read_responses(sock, 1)
        rest = _read_until_closed(sock)
    assert [r.status for r in responses] == [400], responses
    assert responses[0].headers.get("connection") == "close"
    assert rest == b""


# the native front end's promise: uvicorn answers 400 at once and drops the answers owed
@pytest.mark.parametrize("front_end", ["native"], indirect=True)
def test_malformed_request_after_others_waits_for_their_answers(server: RunningServer) -> None:
    infer = json_infer("simple", "before", {"INPUT0": A, "INPUT1": B})
    with connect(server) as sock:
        sock.sendall(infer + b"NOT AN HTTP REQUEST\r\n\r\n")
        responses = read_responses(sock, 2)
        rest = _read_until_closed(sock)
    assert [r.status for r in responses] == [200, 400], responses
    assert orjson.loads(responses[0].body)["id"] == "before"
    assert rest == b""
