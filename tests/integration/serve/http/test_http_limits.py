"""The HTTP limits over a real socket, on a server started with small ones: a body over
--http-max-input-size is answered 413 from its headers alone (the body is never sent) and a
client that sends it anyway still reads the 413; a request left half sent is answered 408 after
--http-read-timeout; past --http-max-connections, requests get 503; through all of it the
server keeps serving."""

from __future__ import annotations

import shutil
import socket
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager

import httpx
import numpy as np
import orjson
import pytest
import tritonclient.http as httpclient

from tests.conftest import BUNDLED_REPOSITORY
from tests.support.raw_http import http_request, read_responses
from tests.support.server_process import RunningServer, connect, serving

LIMIT = 1 << 20
READ_TIMEOUT_S = 1.0
CONNECTIONS = 6


def _serving(
    tmp_path_factory: pytest.TempPathFactory, *extra: str
) -> AbstractContextManager[RunningServer]:
    root = tmp_path_factory.mktemp("http_limits")
    shutil.copytree(BUNDLED_REPOSITORY / "simple", root / "repository" / "simple")
    return serving(
        root / "repository",
        root / "server.log",
        "--http-max-input-size",
        str(LIMIT),
        "--http-read-timeout",
        str(READ_TIMEOUT_S),
        "--http-max-connections",
        str(CONNECTIONS),
        *extra,
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    with _serving(tmp_path_factory) as running:
        yield running


def _still_serves(server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(server.url)
    try:
        inputs = []
        for name in ("INPUT0", "INPUT1"):
            tensor = httpclient.InferInput(name, [1, 16], "INT32")
            tensor.set_data_from_numpy(np.ones((1, 16), np.int32))
            inputs.append(tensor)
        result = client.infer("simple", inputs)
        assert result.as_numpy("OUTPUT0").tolist() == [[2] * 16]
    finally:
        client.close()


def test_oversized_body_is_refused_from_its_headers_before_it_is_sent(
    server: RunningServer,
) -> None:
    with connect(server) as sock:
        head = http_request("POST", "/v2/models/simple/infer", b"")
        head = head.replace(b"Content-Length: 0", b"Content-Length: %d" % (LIMIT + 1))
        sock.sendall(head)  # the headers only: the answer must not wait for the body
        (refused,) = read_responses(sock, 1, timeout_s=5)
    assert refused.complete and refused.status == 413, refused
    message = refused.body.decode()
    assert f"{LIMIT} bytes" in message and "--http-max-input-size" in message
    _still_serves(server)


def test_a_client_sending_the_oversized_body_anyway_reads_the_413(server: RunningServer) -> None:
    body = b"{" + b" " * (4 * LIMIT) + b"}"
    response = httpx.post(f"{server.base}/v2/models/simple/infer", content=body, timeout=10)
    assert response.status_code == 413, response.text
    assert "--http-max-input-size" in response.json()["error"]
    _still_serves(server)


def test_a_body_within_the_limit_is_served(server: RunningServer) -> None:
    inputs = [
        {"name": n, "datatype": "INT32", "shape": [1, 16], "data": [1] * 16}
        for n in ("INPUT0", "INPUT1")
    ]
    padding = b" " * (LIMIT - 2000)  # JSON whitespace: a body just under the limit
    body = b'{"inputs": %b%b}' % (orjson.dumps(inputs), padding)
    assert len(body) <= LIMIT
    response = httpx.post(f"{server.base}/v2/models/simple/infer", content=body, timeout=10)
    assert response.status_code == 200, response.text


def test_a_half_sent_request_is_answered_408_after_the_read_timeout(
    server: RunningServer,
) -> None:
    with connect(server) as sock:
        head = http_request("POST", "/v2/models/simple/infer", b"{}")
        sock.sendall(head[:-1])  # the body's last byte never comes
        started = time.monotonic()
        (timed_out,) = read_responses(sock, 1, timeout_s=10)
        waited = time.monotonic() - started
        assert timed_out.complete and timed_out.status == 408, timed_out
        assert sock.recv(1) == b""  # closed after it
    assert waited >= READ_TIMEOUT_S * 0.9
    _still_serves(server)


def _served_connection(server: RunningServer, deadline: float) -> socket.socket:
    """A connection whose request is served: one the server still counts from an earlier
    close (it sees closes shortly after they happen) is let go and tried again."""
    while True:
        sock = connect(server)
        sock.sendall(http_request("GET", "/v2/health/live"))
        status = read_responses(sock, 1)[0].status
        if status == 200:
            return sock
        sock.close()
        assert time.monotonic() < deadline, f"a connection under the limit got {status}"
        time.sleep(0.05)


def test_past_the_connection_limit_requests_get_503_until_one_closes(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    # One process: with --workers N each front-end process counts its own connections.
    with _serving(tmp_path_factory, "--workers", "1") as server:
        _connection_limit_holds(server)


def _connection_limit_holds(server: RunningServer) -> None:
    deadline = time.monotonic() + 10
    held = [_served_connection(server, deadline) for _ in range(CONNECTIONS)]
    try:
        with connect(server) as extra:
            extra.sendall(http_request("GET", "/v2/health/live"))
            (refused,) = read_responses(extra, 1)
        assert refused.status == 503 and refused.headers.get("retry-after") == "1"
        assert "--http-max-connections" in refused.body.decode()
    finally:
        for sock in held:
            sock.close()
    _served_connection(server, time.monotonic() + 10).close()
    _still_serves(server)


def test_the_uvicorn_front_end_refuses_oversized_bodies_too(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    with _serving(tmp_path_factory, "--http-front-end", "uvicorn") as running:
        big = b"{" + b" " * (2 * LIMIT) + b"}"
        response = httpx.post(f"{running.base}/v2/models/simple/infer", content=big, timeout=10)
        assert response.status_code == 413, response.text
        assert "--http-max-input-size" in response.json()["error"]
        chunked = httpx.post(
            f"{running.base}/v2/repository/index",
            content=iter([b"{" + b" " * LIMIT, b" " * LIMIT + b"}"]),  # no Content-Length
            timeout=10,
        )
        assert chunked.status_code == 413, chunked.text
        _still_serves(running)


def test_a_body_past_the_buffered_budget_waits_for_the_one_ahead(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    # The budget holds one body of the size limit: a second request, whose body comes after its
    # head, waits unread and unanswered until the first is whole and handed on. (A body that
    # came in the same read as its head is in memory already: it is handed on at once.)
    infer = "/v2/models/simple/infer"
    with _serving(
        tmp_path_factory,
        "--http-read-timeout",
        "60",
        "--http-max-buffered-input-size",
        str(LIMIT),
        "--workers",  # one process: with --workers N each front end has a budget of its own
        "1",
    ) as running:
        with connect(running) as first, connect(running) as second:
            body = b"{" + b" " * (LIMIT - 2) + b"}"
            head = http_request("POST", infer, body)[: -len(body)]
            first.sendall(head + body[: LIMIT // 2])
            time.sleep(0.2)  # the first holds the whole budget
            second.sendall(http_request("POST", infer, b"{}")[:-2])  # its head
            time.sleep(0.2)
            second.sendall(b"{}")  # its body, not read while it waits
            assert read_responses(second, 1, timeout_s=1.0) == []  # nor answered
            first.sendall(body[LIMIT // 2 :])
            (answered_first,) = read_responses(first, 1)
            (answered_second,) = read_responses(second, 1)
        assert answered_first.status == 400  # no inputs: the body was read whole
        assert answered_second.status == 400, answered_second.body
        _still_serves(running)
