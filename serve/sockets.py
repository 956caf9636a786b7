"""Listening sockets for the endpoints."""

from __future__ import annotations

import socket

# Connections the kernel holds for an endpoint before it accepts them (uvicorn's default; the
# kernel caps it at net.core.somaxconn). A client that opens many connections at once (libcurl
# in perf_analyzer's async mode when answers slow down) overflows a short queue, and a refused
# connection fails its request.
LISTEN_BACKLOG = 2048


def bind_tcp(host: str, port: int) -> socket.socket:
    """A bound TCP socket (port 0: a free one) with SO_KEEPALIVE, which every accepted
    connection inherits, so peers that vanish without closing are found and dropped."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock
