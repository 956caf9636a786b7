"""Messages over a Unix socket between the core and a front end: a 4-byte big-endian length,
then the pickled message. `FrameProtocol` is the event-loop side (both processes);
`BlockingConnection` is the front end's connection for calls that must answer at once."""

from __future__ import annotations

import asyncio
import logging
import pickle
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any, cast

log = logging.getLogger("serve.workers")

_HEADER = struct.Struct("!I")


def encode(message: Any) -> bytes:
    """One message as it goes on the socket: its length, then its pickle."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(data)) + data


class FrameProtocol(asyncio.Protocol):
    """Hands each whole message to `on_message` (on the loop's thread); `send` may be called
    from any thread. `closed` is set when the connection is gone."""

    def __init__(self, on_message: Callable[[Any], None]) -> None:
        self._on_message = on_message
        self._buffer = bytearray()
        self._transport: asyncio.Transport | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = 0
        self.closed = asyncio.Event()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        start = 0
        while len(buffer) - start >= _HEADER.size:
            (size,) = _HEADER.unpack_from(buffer, start)
            end = start + _HEADER.size + size
            if len(buffer) < end:
                break
            message = pickle.loads(memoryview(buffer)[start + _HEADER.size : end])
            start = end
            try:
                self._on_message(message)
            except Exception:  # a bug in a handler must not end the connection
                log.exception("handling %s failed", type(message).__name__)
        if start:
            del buffer[:start]

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        self.closed.set()

    def send(self, message: Any) -> None:
        """Send `message`; dropped once the connection is gone."""
        frame = encode(message)
        if self._loop is None:
            return
        if threading.get_ident() == self._thread:
            self._write(frame)
        else:
            self._loop.call_soon_threadsafe(self._write, frame)

    def _write(self, frame: bytes) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(frame)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


class BlockingConnection:
    """A connected Unix socket for one call at a time, answered before `call` returns (the
    DataPlane's plain methods, called on a front end's event loop, answer synchronously)."""

    def __init__(self, path: str) -> None:
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.connect(path)
        self._lock = threading.Lock()

    def send(self, message: Any) -> None:
        self._sock.sendall(encode(message))

    def exchange(self, message: Any) -> Any:
        """Send `message` and return the next message received; EOFError when the core has
        closed the connection."""
        with self._lock:
            self._sock.sendall(encode(message))
            (size,) = _HEADER.unpack(self._read(_HEADER.size))
            return pickle.loads(self._read(size))

    def _read(self, size: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < size:
            chunk = self._sock.recv(size - len(chunks))
            if not chunk:
                raise EOFError("the server's core closed its connection")
            chunks += chunk
        return bytes(chunks)

    def close(self) -> None:
        self._sock.close()
