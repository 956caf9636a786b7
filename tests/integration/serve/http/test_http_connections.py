"""Keep-alive connections as HTTP/1.1 clients use them, over a plain socket.

Clients pool connections and reuse an idle one whenever they like, without asking first; a
server that closes idle connections on its own loses any request that crosses its close (the
request meets a reset, and libcurl cannot replay a POST). So the server must leave idle
connections open for the client to close. Pipelined requests (several written before the first
answer) must each get a complete response, in order.
"""

from __future__ import annotations

import socket
import time

import numpy as np

from tests.support.raw_http import (
    binary_infer,
    http_request,
    json_infer,
    read_responses,
    split_binary_response,
)
from tests.support.server_process import RunningServer

# Longer than uvicorn's default idle keep-alive timeout (5 s), which the server used to apply.
IDLE_S = 6.5

A = np.arange(16, dtype=np.int32).reshape(1, 16)
B = np.full((1, 16), 3, dtype=np.int32)


def _connect(server: RunningServer) -> socket.socket:
    return socket.create_connection((server.host, server.port), timeout=10)


def test_idle_keep_alive_connection_stays_open(server: RunningServer) -> None:
    with _connect(server) as sock:
        sock.sendall(json_infer("simple", "before", {"INPUT0": A, "INPUT1": B}))
        (first,) = read_responses(sock, 1)
        assert first.complete and first.status == 200, first
        assert "close" not in first.headers.get("connection", "")

        time.sleep(IDLE_S)  # a client's pooled connection, idle between two bursts

        sock.sendall(json_infer("simple", "after", {"INPUT0": A, "INPUT1": B}))
        responses = read_responses(sock, 1)
    assert [r.status for r in responses if r.complete] == [200], (
        f"the server closed a keep-alive connection after {IDLE_S} s idle: the request written "
        "on it was lost"
    )
    body = responses[0].body
    assert b'"id":"after"' in body


def test_pipelined_requests_answered_completely_in_order(server: RunningServer) -> None:
    requests = [
        binary_infer("simple", "first", {"INPUT0": A, "INPUT1": B}),
        json_infer("simple", "second", {"INPUT0": B, "INPUT1": A}),
        http_request("GET", "/v2/health/ready"),
        binary_infer("simple", "fourth", {"INPUT0": A, "INPUT1": A}),
    ]
    with _connect(server) as sock:
        sock.sendall(b"".join(requests))  # one write: all four are on the wire before any answer
        responses = read_responses(sock, len(requests))
        # The connection is still usable afterwards.
        sock.sendall(http_request("GET", "/v2/health/live"))
        (after,) = read_responses(sock, 1)

    assert [r.complete for r in responses] == [True] * 4, responses
    assert [r.status for r in responses] == [200, 200, 200, 200], responses
    assert after.complete and after.status == 200

    header, blob = split_binary_response(responses[0])
    assert header["id"] == "first"
    sums = np.frombuffer(blob[:64], dtype="<i4")
    assert sums.tolist() == (A + B).ravel().tolist()

    assert b'"id":"second"' in responses[1].body
    assert responses[2].body == b""

    header, blob = split_binary_response(responses[3])
    assert header["id"] == "fourth"
    assert np.frombuffer(blob[:64], dtype="<i4").tolist() == (A + A).ravel().tolist()
