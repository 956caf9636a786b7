"""Where collected traces go: `<trace_file>` (one JSON array, grown at each flush) or, with a
log frequency, `<trace_file>.0`, `<trace_file>.1`, ... (one JSON array each).

Every write replaces the file atomically (temporary file, fsync, rename): a reader, or a server
killed at any moment, sees a complete JSON document, never a half-written one.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import orjson

from common.atomic import write_bytes_atomic

log = logging.getLogger("serve.trace")


class TraceFile:
    """Where the traces set to one file go: `append` grows the main file's array, `write_indexed`
    writes the next numbered file; each write replaces its file atomically."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self._index = 0
        self._written = False  # the main file holds this run's traces (else it is replaced)

    def append(self, entries: list[dict[str, Any]]) -> None:
        """Add entries to the main file's array."""
        if not entries:
            return
        existing: list[Any] = []
        if self._written:
            try:
                loaded = orjson.loads(self.path.read_bytes())
                existing = loaded if isinstance(loaded, list) else []
            except (OSError, orjson.JSONDecodeError) as exc:
                log.warning("trace file '%s' unreadable (%s): rewritten", self.path, exc)
        self._write(self.path, existing + entries)
        self._written = True

    def write_indexed(self, entries: list[dict[str, Any]]) -> None:
        """Write entries as the next `<file>.<index>`."""
        if not entries:
            return
        target = self.path.with_name(f"{self.path.name}.{self._index}")
        self._index += 1
        self._write(target, entries)

    @staticmethod
    def _write(target: Path, entries: list[dict[str, Any]]) -> None:
        try:
            write_bytes_atomic(target, orjson.dumps(entries))
        except OSError as exc:  # tracing must not take the server down
            log.error("failed writing trace file '%s': %s", target, exc)
