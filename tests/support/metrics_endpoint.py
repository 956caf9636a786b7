"""A stand-in Prometheus endpoint on 127.0.0.1: answers GET /metrics with the text a test sets,
as a server's metrics port would (e.g. Triton's nv_gpu_* lines of a GPU machine)."""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass
class MetricsEndpoint:
    url: str  # host:port, as --metrics-url takes it
    text: str  # what /metrics answers now


@contextlib.contextmanager
def metrics_endpoint(text: str) -> Iterator[MetricsEndpoint]:
    endpoint = MetricsEndpoint("", text)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = endpoint.text.encode()
            self.send_response(200 if self.path == "/metrics" else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    endpoint.url = f"127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield endpoint
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
