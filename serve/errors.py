"""The one domain error type of the serving engine.

Transports map `ErrorKind` to an HTTP status or a gRPC code in one place each; the core never
knows about either.
"""

from __future__ import annotations

import enum


class ErrorKind(enum.Enum):
    """What kind of failure a ServeError is; `serve.http.status` maps each to an HTTP status,
    `serve.grpc.status` to a gRPC code."""

    INVALID_ARGUMENT = "invalid_argument"
    NOT_FOUND = "not_found"
    UNAVAILABLE = "unavailable"
    ALREADY_EXISTS = "already_exists"
    UNSUPPORTED = "unsupported"
    INTERNAL = "internal"
    CANCELLED = "cancelled"  # the client went away (Triton's TRITONSERVER_ERROR_CANCELLED)


class ServeError(Exception):
    """An error with a kind that a transport can map to its own status codes."""

    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message

    @classmethod
    def invalid(cls, message: str) -> ServeError:
        return cls(ErrorKind.INVALID_ARGUMENT, message)

    @classmethod
    def unsupported(cls, message: str) -> ServeError:
        return cls(ErrorKind.UNSUPPORTED, message)

    @classmethod
    def not_found(cls, message: str) -> ServeError:
        return cls(ErrorKind.NOT_FOUND, message)

    @classmethod
    def unavailable(cls, message: str) -> ServeError:
        return cls(ErrorKind.UNAVAILABLE, message)

    @classmethod
    def internal(cls, message: str) -> ServeError:
        return cls(ErrorKind.INTERNAL, message)

    @classmethod
    def cancelled(cls, message: str = "Request cancelled") -> ServeError:
        return cls(ErrorKind.CANCELLED, message)

    def __reduce__(self) -> tuple[type[ServeError], tuple[ErrorKind, str]]:
        # pickled whole (kind and message) as it crosses to or from a front-end process
        return (ServeError, (self.kind, self.message))

    def __repr__(self) -> str:
        return f"ServeError({self.kind.name}, {self.message!r})"
