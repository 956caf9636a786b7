"""One end of the socket between the server and a stub: messages in, messages out."""

from __future__ import annotations

import math
import select
import threading
from multiprocessing.connection import Connection
from typing import Any

from serve.backends.python.protocol import decode, encode


class Channel:
    """Sends and receives `protocol` messages over a connected socket's file descriptor. Any
    thread may send; a lock keeps messages whole."""

    def __init__(self, fd: int) -> None:
        self._conn = Connection(fd)
        # A poll object made once is much cheaper per wait than Connection.poll.
        self._poller = select.poll()
        self._poller.register(fd, select.POLLIN)
        self._send_lock = threading.Lock()

    def send(self, message: Any) -> None:
        data = encode(message)
        with self._send_lock:
            self._conn.send(data)

    def recv(self) -> Any:
        """The next message (blocking); EOFError once the other end has closed."""
        return decode(self._conn.recv())

    def fileno(self) -> int:
        return self._conn.fileno()

    def poll(self, timeout_s: float) -> bool:
        """True when a message (or the end of the stream) is ready within timeout_s."""
        return bool(self._poller.poll(math.ceil(timeout_s * 1000)))

    def close(self) -> None:
        self._conn.close()
