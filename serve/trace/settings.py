"""Trace settings as Triton's trace extension names them, parsed and checked.

Values travel as lists of strings (gRPC's SettingValue; HTTP sends a string, or a list for
trace_level). A setting's effective values are the defaults (tritonserver's `--trace-config`
flags: `parse_trace_config`), then the global overrides, then the model's own overrides; `None`
in an update clears an override back to what lies beneath.

The trace file is chosen at start (`--trace-config triton,file=PATH`) and cannot be set through
the API, as in tritonserver since 24.04: a client that could name it could make the server
write any file it may write.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from common.invariant import InvariantError
from serve.errors import ErrorKind, ServeError

TIMESTAMPS = "TIMESTAMPS"
TENSORS = "TENSORS"
OFF = "OFF"
LEVELS = (TIMESTAMPS, TENSORS)  # the order Triton lists them in
MODE_TRITON = "triton"

# setting name -> TraceValues field
SETTING_FIELDS = {
    "trace_file": "file",
    "trace_level": "level",
    "trace_rate": "rate",
    "trace_count": "count",
    "log_frequency": "log_frequency",
    "trace_mode": "mode",
}
Update = dict[str, list[str] | None]


@dataclass(frozen=True, slots=True)
class TraceValues:
    """One scope's effective settings; `level` is empty when tracing is OFF."""

    level: tuple[str, ...] = ()
    rate: int = 1000  # trace one request in `rate`
    count: int = -1  # traces left to collect; -1: no limit
    log_frequency: int = 0  # write every N traces to <file>.<index>; 0: to <file>, at the end
    file: str = ""
    mode: str = MODE_TRITON

    def with_overrides(self, overrides: dict[str, Any]) -> TraceValues:
        return replace(self, **overrides)

    def to_setting(self) -> dict[str, list[str]]:
        """Every setting as a list of strings, as the trace extension answers."""
        return {
            "trace_file": [self.file],
            "trace_level": list(self.level) or [OFF],
            "trace_rate": [str(self.rate)],
            "trace_count": [str(self.count)],
            "log_frequency": [str(self.log_frequency)],
            "trace_mode": [self.mode],
        }

    def check(self, scope: str) -> None:
        """Raise when these values would trace but cannot (Triton accepts an invalid setting
        only while it leaves tracing off)."""
        if self.level and not self.file:
            raise ServeError.invalid(
                f"tracing {scope} at level {', '.join(self.level)} needs a trace file and "
                "'trace_file' is not set: start the server with --trace-config triton,file=PATH"
            )


DEFAULTS = TraceValues()
if {f.name for f in fields(TraceValues)} != set(SETTING_FIELDS.values()):
    raise InvariantError("every trace setting is a field of TraceValues, and only those")


def parse_update(update: Update) -> dict[str, Any]:
    """Setting name -> TraceValues field name and parsed value (None: clear); ServeError
    (INVALID_ARGUMENT, naming the setting) for unknown names and bad values."""
    parsed: dict[str, Any] = {}
    for name, values in update.items():
        field_name = SETTING_FIELDS.get(name)
        if field_name is None:
            known = ", ".join(SETTING_FIELDS)
            raise ServeError.invalid(f"unknown trace setting '{name}' (known: {known})")
        if values is None:
            parsed[field_name] = None
            continue
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise ServeError.invalid(
                f"trace setting '{name}' must be a string or a list of strings, got {values!r}"
            )
        parsed[field_name] = _parse_value(name, values)
    return parsed


def _parse_value(name: str, values: list[str]) -> Any:
    if name == "trace_level":
        return _parse_level(values)
    if len(values) != 1:
        raise ServeError.invalid(f"trace setting '{name}' takes one value, got {values}")
    value = values[0].strip()
    if name == "trace_file":
        raise ServeError(
            ErrorKind.UNSUPPORTED,
            "trace file location can not be updated through network protocol (start the "
            "server with --trace-config triton,file=PATH)",
        )
    if name == "trace_mode":
        if value == "opentelemetry":
            raise ServeError(
                ErrorKind.UNSUPPORTED,
                "trace setting 'trace_mode': only 'triton' is supported (no OpenTelemetry)",
            )
        if value != MODE_TRITON:
            raise ServeError.invalid(f"trace setting 'trace_mode' must be 'triton', got '{value}'")
        return value
    minimum = {"trace_rate": 1, "trace_count": -1, "log_frequency": 0}[name]
    try:
        number = int(value)
    except ValueError:
        number = None
    if number is None or number < minimum or number > 2**31 - 1:
        raise ServeError.invalid(
            f"trace setting '{name}' must be a whole number >= {minimum}, got '{value}'"
        )
    return number


def _parse_level(values: list[str]) -> tuple[str, ...]:
    if not values:
        raise ServeError.invalid("trace setting 'trace_level' needs at least one level")
    levels = {v.strip().upper() for v in values}
    if OFF in levels:
        if len(values) > 1:
            raise ServeError.invalid("trace setting 'trace_level': 'OFF' must be the only level")
        return ()
    unknown = sorted(levels - set(LEVELS))
    if unknown:
        raise ServeError.invalid(
            f"trace setting 'trace_level': unknown level '{unknown[0]}' "
            f"(levels: {OFF}, {', '.join(LEVELS)})"
        )
    return tuple(level for level in LEVELS if level in levels)


def _parse_file(value: str) -> str:
    if value and not Path(value).expanduser().absolute().parent.is_dir():
        raise ServeError.invalid(
            f"trace setting 'trace_file': the folder of '{value}' does not exist"
        )
    return str(Path(value).expanduser()) if value else ""


# --trace-config keys -> trace setting names (`file` and `log-frequency` belong to the triton
# mode and may be written `triton,file=...`)
_CONFIG_KEYS = {
    "file": "trace_file",
    "log-frequency": "log_frequency",
    "rate": "trace_rate",
    "count": "trace_count",
    "level": "trace_level",
    "mode": "trace_mode",
}


def parse_trace_config(specs: Iterable[str]) -> TraceValues:
    """The global defaults from tritonserver's `--trace-config` values (`[triton,]KEY=VALUE`,
    repeatable; `level` may be given several times); ValueError naming the flag's value."""
    values = DEFAULTS
    levels: list[str] = []
    for spec in specs:
        mode, comma, pair = spec.partition(",")
        if not comma or "=" in mode:
            mode, pair = "", spec
        key, equals, value = pair.partition("=")
        name = _CONFIG_KEYS.get(key.strip())
        try:
            if mode not in ("", MODE_TRITON):
                raise ServeError.invalid(f"unknown trace mode '{mode}' (only '{MODE_TRITON}')")
            if not equals or name is None:
                raise ServeError.invalid(
                    f"expected [triton,]KEY=VALUE with KEY one of {', '.join(_CONFIG_KEYS)}"
                )
            if name == "trace_level":
                levels.append(value)
            elif name == "trace_file":
                values = replace(values, file=_parse_file(value.strip()))
            else:
                values = replace(values, **{SETTING_FIELDS[name]: _parse_value(name, [value])})
        except ServeError as exc:
            raise ValueError(f"--trace-config '{spec}': {exc.message}") from None
    try:
        if levels:
            values = replace(values, level=_parse_level(levels))
        values.check("the server")
    except ServeError as exc:
        raise ValueError(f"--trace-config: {exc.message}") from None
    return values
