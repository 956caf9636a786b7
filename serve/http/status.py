"""The one place where domain errors become HTTP statuses, as tritonserver answers them."""

from __future__ import annotations

from serve.errors import ErrorKind

HTTP_STATUS: dict[ErrorKind, int] = {
    ErrorKind.INVALID_ARGUMENT: 400,
    ErrorKind.UNSUPPORTED: 501,
    ErrorKind.NOT_FOUND: 404,
    ErrorKind.ALREADY_EXISTS: 400,
    ErrorKind.UNAVAILABLE: 503,
    ErrorKind.INTERNAL: 500,
    ErrorKind.CANCELLED: 400,  # tritonserver's answer too: HTTP has no status for it
}
