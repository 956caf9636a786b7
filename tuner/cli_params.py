"""The tuner CLI's typed flags: latency budgets ("500us", "10ms", "1.5s") and wall-clock
budgets ("90s", "10m", "1.5h"; a bare number is seconds), both given to the command as a
`tuner.duration.Duration`; memory sizes ("8GiB", "512MiB", "2GB"; a bare number is bytes)."""

from __future__ import annotations

import re

import click

from tuner.duration import UNITS, Duration, DurationKind


class DurationParam(click.ParamType):
    """A duration flag of `kind` ("latency" or "wall_clock"), converted to a `Duration`."""

    name = "duration"

    def __init__(self, kind: DurationKind) -> None:
        if kind not in UNITS:  # an unknown kind fails here, not on the first flag
            raise ValueError(f"unknown duration kind {kind!r} (latency or wall_clock)")
        self.kind: DurationKind = kind

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> Duration:
        if isinstance(value, Duration):
            return value
        try:
            return Duration.parse(str(value), self.kind)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


LATENCY = DurationParam("latency")
WALL_CLOCK = DurationParam("wall_clock")


_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes from "8GiB", "512 MiB", "2GB", "1073741824"; ValueError naming the units."""
    match = _SIZE.fullmatch(text)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _SIZE_UNITS:
        raise ValueError(
            f"'{text}' is not a size: a number and one of B, KB, MB, GB, KiB, MiB, GiB"
        )
    size = int(float(match.group(1)) * _SIZE_UNITS[unit])
    if size <= 0:
        raise ValueError(f"'{text}' is not a size above 0")
    return size


class SizeParam(click.ParamType):
    """A memory size flag, converted to bytes."""

    name = "size"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_size(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


SIZE = SizeParam()
