"""Every domain error kind has its gRPC status, as Triton maps its error codes."""

from __future__ import annotations

import grpc

from serve.errors import ErrorKind
from serve.grpc.status import GRPC_STATUS


def test_every_error_kind_has_a_status() -> None:
    assert set(GRPC_STATUS) == set(ErrorKind)


def test_the_statuses_are_tritons() -> None:
    assert GRPC_STATUS[ErrorKind.INVALID_ARGUMENT] is grpc.StatusCode.INVALID_ARGUMENT
    assert GRPC_STATUS[ErrorKind.NOT_FOUND] is grpc.StatusCode.NOT_FOUND
    assert GRPC_STATUS[ErrorKind.UNAVAILABLE] is grpc.StatusCode.UNAVAILABLE
    assert GRPC_STATUS[ErrorKind.ALREADY_EXISTS] is grpc.StatusCode.ALREADY_EXISTS
    assert GRPC_STATUS[ErrorKind.UNSUPPORTED] is grpc.StatusCode.UNIMPLEMENTED
    assert GRPC_STATUS[ErrorKind.INTERNAL] is grpc.StatusCode.INTERNAL
    assert GRPC_STATUS[ErrorKind.CANCELLED] is grpc.StatusCode.CANCELLED
