"""The server's logging, set up once at start and changed while serving (Triton's logging
extension): where logs go (log_file, "" = stderr), which severities are written (log_info,
log_warning, log_error), how verbose (log_verbose_level: 1 and up adds the server's verbose
(debug) messages, 2 and up every library's debug messages too) and the line format
("default" | "ISO8601").

One handler on the root logger writes everything, so uvicorn's and grpc's loggers follow the
same settings; a filter drops the severities that are switched off.

The log file is chosen at start (`--log-file`) and cannot be changed through the API, as in
tritonserver since 24.04: a client that could name the file could make the server write, or
append its log lines to, any file it may write.
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

from common.invariant import present
from serve.errors import ErrorKind, ServeError

SERVER_LOGGER = "serve"
FORMATS = ("default", "ISO8601")
_LINE = "%(asctime)s %(levelname).1s %(name)s: %(message)s"

LogValue = bool | int | str


@dataclass(frozen=True, slots=True)
class LogValues:
    """One state of the logging settings, under Triton's names; the defaults are the server's
    without log flags (everything but verbose to stderr, default format)."""

    log_file: str = ""
    log_info: bool = True
    log_warning: bool = True
    log_error: bool = True
    log_verbose_level: int = 0
    log_format: str = "default"


class _SeverityFilter(logging.Filter):
    def __init__(self, values: LogValues) -> None:
        super().__init__()
        self.values = values

    def filter(self, record: logging.LogRecord) -> bool:
        level = record.levelno
        if level >= logging.ERROR:
            return self.values.log_error
        if level >= logging.WARNING:
            return self.values.log_warning
        if level >= logging.INFO:
            return self.values.log_info
        return self.values.log_verbose_level > 0


class _IsoFormatter(logging.Formatter):
    """Lines stamped in ISO 8601 UTC, as Triton's ISO8601 log format."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        return f"{stamp}.{int(record.msecs):03d}Z"


class LogSettings:
    """The logging settings in force; `install` applies them to the process's logging."""

    def __init__(self, values: LogValues | None = None, *, log_file: str = "") -> None:
        self.values = values if values is not None else LogValues(log_file=log_file)
        self._handler: logging.Handler | None = None
        self._filter = _SeverityFilter(self.values)

    def current(self) -> dict[str, LogValue]:
        return asdict(self.values)

    def update(self, update: dict[str, Any]) -> dict[str, LogValue]:
        """Apply the given settings (the others stay); ServeError naming a bad setting, and
        then nothing changes. `log_file` is refused: it is chosen at start."""
        if not update:
            return self.current()
        if "log_file" in update:
            raise ServeError(
                ErrorKind.UNSUPPORTED,
                "log file location can not be updated through network protocol (start the "
                "server with --log-file)",
            )
        parsed: dict[str, Any] = {k: _parse(k, v) for k, v in update.items()}
        self._apply(replace(self.values, **parsed), None)
        logging.getLogger(SERVER_LOGGER).debug("log settings now %s", self.current())
        return self.current()

    def install(self) -> None:
        """Route the process's logging through these settings."""
        self._apply(self.values, self._new_handler(self.values))

    def _new_handler(self, values: LogValues) -> logging.Handler:
        if not values.log_file:
            return logging.StreamHandler(sys.stderr)
        try:
            return logging.FileHandler(values.log_file, encoding="utf-8")
        except OSError as exc:
            raise ServeError.invalid(
                f"--log-file: cannot write '{values.log_file}': {exc.strerror}"
            ) from None

    def _apply(self, values: LogValues, handler: logging.Handler | None) -> None:
        root = logging.getLogger()
        if handler is None and self._handler is None:
            handler = self._new_handler(values)
        if handler is not None:
            handler.addFilter(self._filter)
            root.addHandler(handler)
            if self._handler is not None:
                root.removeHandler(self._handler)
                self._handler.close()
            self._handler = handler
        current = present(self._handler, "a handler is made when there is none")
        iso = values.log_format == "ISO8601"
        current.setFormatter(_IsoFormatter(_LINE) if iso else logging.Formatter(_LINE))
        self.values = values
        self._filter.values = values
        verbose = values.log_verbose_level
        root.setLevel(logging.DEBUG if verbose > 1 else logging.INFO)
        logging.getLogger(SERVER_LOGGER).setLevel(logging.DEBUG if verbose > 0 else logging.NOTSET)


def _parse(name: str, value: Any) -> LogValue:
    if name in ("log_info", "log_warning", "log_error"):
        if not isinstance(value, bool):
            raise ServeError.invalid(f"log setting '{name}' must be true or false, got {value!r}")
        return value
    if name == "log_verbose_level":
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ServeError.invalid(
                f"log setting 'log_verbose_level' must be a whole number >= 0, got {value!r}"
            )
        return value
    if name == "log_format":
        if value not in FORMATS:
            raise ServeError.invalid(
                f"log setting 'log_format' must be 'default' or 'ISO8601', got {value!r}"
            )
        return str(value)
    known = ", ".join(LogValues.__dataclass_fields__)
    raise ServeError.invalid(f"unknown log setting '{name}' (known: {known})")
