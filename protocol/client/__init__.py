"""Clients of a KServe v2 server: control calls and inference.

HTTP/1.1 today (`protocol.client.http`: control calls and infer request framing;
`protocol.client.infer_connection`: the keep-alive infer connection of a load generator;
`protocol.client.blocking`: the control calls for synchronous code). A gRPC client belongs
beside them with the same calls.
"""

from protocol.client.blocking import BlockingClient
from protocol.client.http import Endpoint, HttpClient, parse_url

__all__ = ["BlockingClient", "Endpoint", "HttpClient", "parse_url"]
