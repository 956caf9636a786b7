"""Framing of the messages between the load driver and its worker processes.

A message is a tuple of plain values (ints, floats, strings, bytes, lists, tuples, dicts),
sent as a 4-byte little-endian length and its `marshal` form: the cheapest serialisation in the
standard library for bulk record tuples, and safe here because both ends run the same
interpreter binary (the parent spawns the workers with `sys.executable`).
"""

from __future__ import annotations

import asyncio
import marshal
import struct
from typing import Any

_LENGTH = struct.Struct("<I")

Message = tuple[Any, ...]


def encode(message: Message) -> bytes:
    """`message` framed for the channel: its length, then its marshal form."""
    payload = marshal.dumps(message)
    return _LENGTH.pack(len(payload)) + payload


async def read(reader: asyncio.StreamReader) -> Message | None:
    """The next message; None at the end of the stream (the other side has gone)."""
    try:
        (length,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
        message = marshal.loads(await reader.readexactly(length))
    except asyncio.IncompleteReadError:
        return None
    if not isinstance(message, tuple) or not message:
        raise ValueError(f"malformed message from the other process: {message!r:.100}")
    return message
