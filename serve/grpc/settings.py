"""Trace and log settings messages <-> the DataPlane's plain values.

Trace settings are lists of strings per key; an update whose value list is empty clears the
model's setting back to the global one (None for the DataPlane). Log settings are one bool,
uint32 or string per key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tritonclient.grpc import service_pb2 as pb

from serve.errors import ServeError


def decode_trace_settings(settings: Mapping[str, Any]) -> dict[str, list[str] | None]:
    """A TraceSettingRequest's settings as the DataPlane takes them: each key's values, None for an
    empty list (back to the global setting)."""
    return {key: list(value.value) or None for key, value in settings.items()}


def encode_trace_settings(settings: Mapping[str, list[str]]) -> pb.TraceSettingResponse:
    """The DataPlane's trace settings (each key's values) as a TraceSettingResponse."""
    response = pb.TraceSettingResponse()
    for key, values in settings.items():
        response.settings[key].value.extend(values)
    return response


def decode_log_settings(settings: Mapping[str, Any]) -> dict[str, bool | int | str]:
    """A LogSettingsRequest's settings as plain values; ServeError (invalid) naming a key that has
    none."""
    update: dict[str, bool | int | str] = {}
    for key, value in settings.items():
        choice = value.WhichOneof("parameter_choice")
        if choice is None:
            raise ServeError.invalid(f"log setting '{key}' has no value")
        update[key] = getattr(value, choice)
    return update


def encode_log_settings(settings: Mapping[str, bool | int | str]) -> pb.LogSettingsResponse:
    """The DataPlane's log settings as a LogSettingsResponse, each value in the field of its type
    (bool, uint32, string)."""
    response = pb.LogSettingsResponse()
    for key, value in settings.items():
        entry = response.settings[key]
        if isinstance(value, bool):
            entry.bool_param = value
        elif isinstance(value, int):
            entry.uint32_param = value
        else:
            entry.string_param = value
    return response
