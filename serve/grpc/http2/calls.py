"""What the HTTP/2 layer asks of the methods it serves, and what it gives them: a `Call`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from serve.grpc.http2.connection import Call


class StreamListener(Protocol):
    """Receives a streaming call's messages, in order."""

    def on_message(self, message: bytes) -> None: ...

    def on_half_close(self) -> None:
        """The client sent its last message; the listener finishes the call when it is done."""
        ...

    def on_cancel(self) -> None:
        """The client reset the stream or the connection closed: stop sending."""
        ...


UnaryHandler = Callable[[bytes, "Call"], None]
StreamOpener = Callable[["Call"], StreamListener]


@dataclass(frozen=True, slots=True)
class RpcMethod:
    """One method: `unary` gets the request message and answers with `call.respond` or
    `call.finish` (now or later); `open_stream` gets the call of a bidirectional stream."""

    unary: UnaryHandler | None = None
    open_stream: StreamOpener | None = None


Router = Callable[[bytes], RpcMethod | None]  # ':path' -> method, None when unknown
