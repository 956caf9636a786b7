"""The tuner CLI's duration flags: latency budgets in microseconds, wall-clock budgets in
seconds, both parsed by `tuner.budget.parse_duration`."""

from __future__ import annotations

import click

from tuner.budget import parse_duration


class Duration(click.ParamType):
    """A duration flag, converted to `unit`: "us" for latency budgets ("500us", "10ms",
    "1.5s"), "s" for wall-clock budgets ("90s", "10m", "1.5h"; a bare number is seconds)."""

    name = "duration"

    def __init__(self, unit: str) -> None:
        parse_duration("1s", unit)  # an unknown unit fails here, not on the first flag
        self.unit = unit

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, float):
            return value
        try:
            return parse_duration(str(value), self.unit)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


LATENCY = Duration("us")
WALL_CLOCK = Duration("s")
