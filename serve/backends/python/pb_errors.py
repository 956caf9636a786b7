"""The error types of Triton's python backend API: `TritonError` (one response's error) and
`TritonModelException` (misuse of the API, or a model's own failure)."""

from __future__ import annotations


class TritonModelException(Exception):
    """Raised by the API on misuse; a model may raise it too."""


class TritonError:
    """An error for one response: `InferenceResponse(error=TritonError("msg", code))`.

    The codes are TRITONSERVER_Error_Code's values; without one the error is INTERNAL, as in
    Triton."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __init__(self, message: str, code: int = INTERNAL) -> None:
        if message is None:
            raise TypeError("TritonError: message must be a str, not None")
        if code is None:
            raise TypeError("TritonError: code must be one of TritonError's codes, not None")
        self._message = str(message)
        self._code = int(code)

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code

    def __repr__(self) -> str:
        return f"TritonError({self._message!r}, code={self._code})"
