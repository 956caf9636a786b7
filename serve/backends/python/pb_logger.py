"""`pb_utils.Logger`: a model's log lines, written to the stub's stderr (the server's log
stream) with the level letter and the model file's line, as Triton's server log shows them."""

from __future__ import annotations

import enum
import os
import sys


class LogLevel(enum.IntEnum):
    """`pb_utils.LogLevel`: the levels `Logger.log` takes, with Triton's values."""

    INFO = 0
    WARNING = 1
    ERROR = 2
    VERBOSE = 3


_LETTER = {LogLevel.INFO: "I", LogLevel.WARNING: "W", LogLevel.ERROR: "E", LogLevel.VERBOSE: "V"}


class Logger:
    """Triton's model logger: `Logger.log(message, level)` and one method per level."""

    LogLevel = LogLevel
    INFO = LogLevel.INFO
    WARNING = LogLevel.WARNING
    ERROR = LogLevel.ERROR
    VERBOSE = LogLevel.VERBOSE

    @staticmethod
    def log(message: str, level: int = LogLevel.INFO) -> None:
        _write(message, level)

    @staticmethod
    def log_info(message: str) -> None:
        _write(message, LogLevel.INFO)

    @staticmethod
    def log_warn(message: str) -> None:
        _write(message, LogLevel.WARNING)

    @staticmethod
    def log_error(message: str) -> None:
        _write(message, LogLevel.ERROR)

    @staticmethod
    def log_verbose(message: str) -> None:
        _write(message, LogLevel.VERBOSE)


def _write(message: str, level: int) -> None:
    try:
        letter = _LETTER[LogLevel(level)]
    except ValueError:
        letter = "I"
    caller = sys._getframe(2)  # the model's frame: _write <- Logger method <- model
    where = f"{os.path.basename(caller.f_code.co_filename)}:{caller.f_lineno}"
    print(f"{letter} {where}] {message}", file=sys.stderr, flush=True)
