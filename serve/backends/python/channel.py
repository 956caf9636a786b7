"""One end of the socket between the server and a stub: messages in, messages out.

A message is a 4-byte big-endian length and the pickled `protocol.encode` tuple. Reads fill a
buffer in large chunks, so a burst of messages costs one system call, and a message already
buffered is `pending` even though the socket itself is no longer readable.
"""

from __future__ import annotations

import math
import pickle
import select
import socket
import struct
import threading
from typing import Any

from serve.backends.python.protocol import decode, encode

_HEADER = struct.Struct("!I")
_CHUNK = 1 << 16  # bytes asked of the socket per read
_JOIN_BELOW = 1 << 16  # smaller messages go out with their header in one write


class Channel:
    """Sends and receives `protocol` messages over a connected socket's file descriptor. Any
    thread may send (a lock keeps messages whole); one thread at a time may receive."""

    def __init__(self, fd: int) -> None:
        self._sock = socket.socket(fileno=fd)
        self._sock.setblocking(True)
        # A poll object made once is much cheaper per wait than select.select.
        self._poller = select.poll()
        self._poller.register(fd, select.POLLIN)
        self._send_lock = threading.Lock()
        self._buffer = bytearray()

    def fileno(self) -> int:
        return self._sock.fileno()

    def send(self, message: Any) -> None:
        data = pickle.dumps(encode(message), protocol=pickle.HIGHEST_PROTOCOL)
        header = _HEADER.pack(len(data))
        with self._send_lock:
            if len(data) < _JOIN_BELOW:
                self._sock.sendall(header + data)
            else:
                self._sock.sendall(header)
                self._sock.sendall(data)

    def recv(self) -> Any:
        """The next message (blocking); EOFError once the other end has closed."""
        buffer = self._buffer
        while True:
            if len(buffer) >= _HEADER.size:
                (size,) = _HEADER.unpack_from(buffer)
                end = _HEADER.size + size
                if len(buffer) >= end:
                    message = pickle.loads(memoryview(buffer)[_HEADER.size : end])
                    del buffer[:end]
                    return decode(message)
                want = max(_CHUNK, end - len(buffer))
            else:
                want = _CHUNK
            chunk = self._sock.recv(want)
            if not chunk:
                raise EOFError("the other end closed the channel")
            buffer += chunk

    @property
    def pending(self) -> bool:
        """Whether a whole message is already buffered (recv returns it without waiting)."""
        buffer = self._buffer
        if len(buffer) < _HEADER.size:
            return False
        return len(buffer) >= _HEADER.size + _HEADER.unpack_from(buffer)[0]

    def poll(self, timeout_s: float) -> bool:
        """True when a message (or the end of the stream) is ready within timeout_s."""
        if self._buffer:
            return True  # a message, or the start of one, is here: recv finishes it
        return bool(self._poller.poll(math.ceil(timeout_s * 1000)))

    def close(self) -> None:
        self._sock.close()
