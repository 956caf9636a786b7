"""Clients of a KServe v2 server: control calls and inference.

HTTP/1.1 (`protocol.client.http`: control calls and infer request framing;
`protocol.client.infer_connection`: the keep-alive infer connection of a load generator) and
gRPC (`protocol.client.grpc`: the same control calls; `protocol.client.grpc_infer`: infer
requests and the load generator's unary and streaming calls). `protocol.client.control` picks
a client by protocol name; `protocol.client.blocking` makes the control calls for synchronous
code.
"""

from protocol.client.blocking import BlockingClient
from protocol.client.control import ControlClient, open_client
from protocol.client.grpc import GrpcClient
from protocol.client.http import Endpoint, HttpClient, parse_url

__all__ = [
    "BlockingClient",
    "ControlClient",
    "Endpoint",
    "GrpcClient",
    "HttpClient",
    "open_client",
    "parse_url",
]
