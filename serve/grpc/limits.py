"""What one gRPC client may hold of the server: message size, calls open at once on one
connection, and connections.

The native front end applies all three: a message over the size limit ends its call with
RESOURCE_EXHAUSTED from its length prefix, before it is read; the stream limit is advertised
in SETTINGS_MAX_CONCURRENT_STREAMS (gRPC clients queue their calls behind it) and a stream
opened past it is reset with REFUSED_STREAM (safe to retry); each call of a connection past the
connection limit fails UNAVAILABLE naming the limit, and the connection is closed. grpcio's
server applies the message and stream limits; it has no connection limit.
"""

from __future__ import annotations

from dataclasses import dataclass

# Triton's clients send messages up to 2 GiB - 1 (protobuf's own limit).
DEFAULT_MAX_MESSAGE_BYTES = 2**31 - 1
DEFAULT_MAX_STREAMS = 1024
DEFAULT_MAX_CONNECTIONS = 4096


@dataclass(frozen=True, slots=True)
class GrpcLimits:
    """The three limits (see above), with the refusal a connection past the limit gets."""

    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES  # received or sent
    max_streams: int = DEFAULT_MAX_STREAMS  # calls open at once on one connection
    max_connections: int = DEFAULT_MAX_CONNECTIONS  # open at once (native front end)

    def too_many_connections(self) -> str:
        return (
            f"the server holds its limit of {self.max_connections} open gRPC connections "
            "(--grpc-max-connections): try again later"
        )
