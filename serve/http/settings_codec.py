"""Trace and log settings between Triton's HTTP JSON and the DataPlane's values.

Trace settings travel as lists of strings in the DataPlane (gRPC's SettingValue); over HTTP a
setting is a string, except trace_level, a list of strings; null clears a model's value.
"""

from __future__ import annotations

from typing import Any

from serve.errors import ServeError
from serve.log_settings import LogValue

LIST_SETTINGS = frozenset({"trace_level"})


def trace_update(body: dict[str, Any]) -> dict[str, list[str] | None]:
    """A trace settings body as the DataPlane's update: each setting's values as strings, None to
    clear it; ServeError (invalid) naming a setting of another type."""
    update: dict[str, list[str] | None] = {}
    for name, value in body.items():
        if value is None:
            update[name] = None
        elif isinstance(value, str):
            update[name] = [value]
        elif isinstance(value, int) and not isinstance(value, bool):
            update[name] = [str(value)]
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            update[name] = list(value)
        else:
            raise ServeError.invalid(
                f"trace setting '{name}' must be a string (a list of strings for trace_level), "
                f"got {value!r}"
            )
    return update


def trace_response(setting: dict[str, list[str]]) -> dict[str, str | list[str]]:
    """The DataPlane's trace settings as Triton's HTTP JSON: a string per setting ("" when it has no
    value), a list for trace_level."""
    return {
        name: values if name in LIST_SETTINGS else (values[0] if values else "")
        for name, values in setting.items()
    }


def log_update(body: dict[str, Any]) -> dict[str, LogValue]:
    """JSON null leaves a setting as it is, as Triton does."""
    update: dict[str, LogValue] = {}
    for name, value in body.items():
        if value is None:
            continue
        if not isinstance(value, (bool, int, str)):
            raise ServeError.invalid(f"log setting '{name}' has a bad value: {value!r}")
        update[name] = value
    return update
