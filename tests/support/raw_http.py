"""HTTP/1.1 over a plain socket, for tests that need to control the bytes and the timing: several
requests in one send (pipelining), or a keep-alive connection left idle before its next request.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field

import httptools
import numpy as np
import orjson


@dataclass
class RawResponse:
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    complete: bool = False


class _Collector:
    """httptools callbacks: every response on the connection, in the order they arrive."""

    def __init__(self) -> None:
        self.responses: list[RawResponse] = []
        self.parser = httptools.HttpResponseParser(self)

    def on_message_begin(self) -> None:
        self.responses.append(RawResponse())

    def on_header(self, name: bytes, value: bytes) -> None:
        self.responses[-1].headers[name.decode().lower()] = value.decode()

    def on_headers_complete(self) -> None:
        self.responses[-1].status = self.parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        self.responses[-1].body += body

    def on_message_complete(self) -> None:
        self.responses[-1].complete = True


def read_responses(sock: socket.socket, count: int, timeout_s: float = 10.0) -> list[RawResponse]:
    """Read until `count` complete responses arrived, the server closed, or the timeout.

    A connection the server reset or closed ends the read early: the caller sees fewer complete
    responses than it asked for."""
    collector = _Collector()
    deadline = time.monotonic() + timeout_s
    while sum(r.complete for r in collector.responses) < count:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        sock.settimeout(remaining)
        try:
            data = sock.recv(65536)
        except (TimeoutError, ConnectionResetError):
            break
        if not data:
            break
        collector.parser.feed_data(data)
    return collector.responses


def http_request(
    method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    if body or method == "POST":
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def json_infer(model: str, request_id: str, inputs: dict[str, np.ndarray]) -> bytes:
    """POST .../infer with the tensors as JSON data."""
    header = {
        "id": request_id,
        "inputs": [
            {"name": n, "datatype": "INT32", "shape": list(a.shape), "data": a.ravel().tolist()}
            for n, a in inputs.items()
        ],
    }
    body = orjson.dumps(header)
    return http_request(
        "POST", f"/v2/models/{model}/infer", body, {"Content-Type": "application/json"}
    )


def binary_infer(model: str, request_id: str, inputs: dict[str, np.ndarray]) -> bytes:
    """POST .../infer with Triton's binary tensor extension, outputs asked for as binary."""
    header = {
        "id": request_id,
        "inputs": [
            {
                "name": n,
                "datatype": "INT32",
                "shape": list(a.shape),
                "parameters": {"binary_data_size": a.nbytes},
            }
            for n, a in inputs.items()
        ],
        "parameters": {"binary_data_output": True},
    }
    json_part = orjson.dumps(header)
    body = json_part + b"".join(a.astype("<i4").tobytes() for a in inputs.values())
    return http_request(
        "POST",
        f"/v2/models/{model}/infer",
        body,
        {
            "Content-Type": "application/octet-stream",
            "Inference-Header-Content-Length": str(len(json_part)),
        },
    )


def split_binary_response(response: RawResponse) -> tuple[dict[str, object], bytes]:
    """The JSON header and the binary tail of a binary-extension response."""
    length = int(response.headers.get("inference-header-content-length", len(response.body)))
    header: dict[str, object] = orjson.loads(response.body[:length])
    return header, response.body[length:]
