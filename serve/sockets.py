"""Listening sockets for the endpoints."""

from __future__ import annotations

import socket

# Connections the kernel holds for an endpoint before it accepts them (uvicorn's default; the
# kernel caps it at net.core.somaxconn). A client that opens many connections at once (libcurl
# in perf_analyzer's async mode when answers slow down) overflows a short queue, and a refused
# connection fails its request.
LISTEN_BACKLOG = 2048


def bind_tcp(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A bound TCP socket (port 0: a free one) with SO_KEEPALIVE, which every accepted
    connection inherits, so peers that vanish without closing are found and dropped.
    `reuse_port`: shared with the server's other front-end processes (SO_REUSEPORT; the kernel
    spreads new connections over the sockets that listen)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def reserve_shared_port(host: str, port: int) -> socket.socket:
    """A socket holding `host:port` (port 0: a free one) for the front-end processes that each
    listen on it with SO_REUSEPORT. It never listens itself, so the kernel hands it no
    connection. A port another socket holds is refused (OSError, address in use), also one
    that socket shares: a second server on the same port would otherwise take half the
    connections."""
    if port:
        bind_tcp(host, port).close()  # raises while anyone else holds the port
    return bind_tcp(host, port, reuse_port=True)
