"""The tuner CLI's duration flags: latency budgets ("500us", "10ms", "1.5s") and wall-clock
budgets ("90s", "10m", "1.5h"; a bare number is seconds), both given to the command as a
`tuner.duration.Duration`."""

from __future__ import annotations

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
