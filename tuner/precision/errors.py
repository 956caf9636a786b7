"""The precision package's one error type."""

from __future__ import annotations

from tuner.errors import TunerError


class PrecisionError(TunerError):
    """A variant cannot be built, validation inputs cannot be read, or a request is invalid.

    The message is meant for the user: it names the file, tensor or precision at fault.
    """
