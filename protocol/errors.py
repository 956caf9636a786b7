"""The errors the protocol package raises; each consumer maps them to its own at its boundary
(serve to an invalid-argument ServeError, the analyzer to AnalyzerError)."""

from __future__ import annotations


class ProtocolError(ValueError):
    """Data that breaks the protocol: an unknown datatype, malformed BYTES framing, a bad
    header value, metadata missing a field. The message says what and where."""


class ClientError(Exception):
    """A client call failed: the server is unreachable, timed out, refused the call (`status`
    is then its HTTP status; over gRPC the HTTP status Triton gives the same error) or answered
    something that is not the protocol."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status
