"""The analyzer's one error type."""

from __future__ import annotations


class AnalyzerError(Exception):
    """A failure the user can act on; `str(error)` is the message to show them.

    Raised for bad flags and input data, an unreachable server, an unknown model, and
    protocol features this analyzer does not support. Per-request failures during a load run
    are not raised: they come back as error records.
    """

    @property
    def message(self) -> str:
        return str(self)
