"""HTTP/1.1 load on plain asyncio streams, for the reliability benchmark: many keep-alive
connections at once, each sending its next request as soon as the last one is answered. An
HTTP client library's connection pool became the bottleneck at this scale (thousands of
requests waiting on hundreds of connections); here a connection is a task and a socket."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import httptools

ANSWER_TIMEOUT_S = 300.0


@dataclass
class Answer:
    status: int = 0
    body: bytes = b""
    complete: bool = False
    keep_alive: bool = True


class _Parser:
    """httptools callbacks for one answer at a time on a keep-alive connection."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.answer = Answer()

    def on_message_begin(self) -> None:
        self.answer = Answer()

    def on_headers_complete(self) -> None:
        self.answer.status = self.parser.get_status_code()
        self.answer.keep_alive = self.parser.should_keep_alive()

    def on_body(self, body: bytes) -> None:
        self.answer.body += body

    def on_message_complete(self) -> None:
        self.answer.complete = True


@dataclass
class Tally:
    """Each request's end: its status code, or the name of the error that ended it."""

    codes: Counter[int | str] = field(default_factory=Counter)
    error_bodies: list[bytes] = field(default_factory=list)  # of answers >= 400, in order

    def sent(self) -> int:
        return sum(self.codes.values())


def request_bytes(path: str, body: bytes, headers: dict[str, str] | None = None) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", f"Content-Length: {len(body)}"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def _exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes
) -> Answer:
    parser = _Parser()
    writer.write(request)
    while not parser.answer.complete:
        data = await asyncio.wait_for(reader.read(65536), ANSWER_TIMEOUT_S)
        if not data:
            raise ConnectionResetError("closed before the answer")
        parser.parser.feed_data(data)
    return parser.answer


async def send_all(
    host: str, port: int, next_request: Callable[[], bytes | None], connections: int
) -> Tally:
    """Send what `next_request` gives (None: no more) over `connections` connections at once;
    a connection the server closes is opened again for the next request."""
    tally = Tally()

    async def connection() -> None:
        reader: asyncio.StreamReader | None = None
        writer: asyncio.StreamWriter | None = None
        while (request := next_request()) is not None:
            try:
                if reader is None or writer is None:
                    reader, writer = await asyncio.open_connection(host, port)
                answer = await _exchange(reader, writer, request)
            except (OSError, TimeoutError, httptools.HttpParserError) as exc:
                tally.codes[type(exc).__name__] += 1
                if writer is not None:
                    writer.close()
                reader = writer = None
                continue
            tally.codes[answer.status] += 1
            if answer.status >= 400:
                tally.error_bodies.append(answer.body)
            if not answer.keep_alive:
                writer.close()
                reader = writer = None
        if writer is not None:
            writer.close()

    await asyncio.gather(*(connection() for _ in range(connections)))
    return tally
