"""The latency budget: a percentile and a limit, parsed from text such as "10ms"."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

PERCENTILES = (90, 95, 99)

_UNITS_US = {"us": 1.0, "µs": 1.0, "μs": 1.0, "ms": 1_000.0, "s": 1_000_000.0}
_ACCEPTED = "us (or µs), ms, s, e.g. '500us', '10ms', '1.5s'"
_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(us|µs|μs|ms|s)\s*$", re.IGNORECASE)


def parse_duration_us(text: str) -> float:
    """A positive duration in microseconds; ValueError naming the value and the accepted units."""
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(
            f"invalid duration '{text}': expected a positive number with a unit, {_ACCEPTED}"
        )
    value = float(match.group(1)) * _UNITS_US[match.group(2).lower()]
    if value <= 0 or not math.isfinite(value):
        raise ValueError(f"invalid duration '{text}': must be greater than zero ({_ACCEPTED})")
    return value


def format_duration_us(value_us: float) -> str:
    """Human form in the largest unit that keeps the number >= 1: 1500 -> '1.5 ms'."""
    if value_us >= 1_000_000:
        return f"{value_us / 1_000_000:g} s"
    if value_us >= 1_000:
        return f"{value_us / 1_000:g} ms"
    return f"{value_us:g} us"


@dataclass(frozen=True, slots=True)
class LatencyBudget:
    """`percentile` (90, 95 or 99) of the request latency must stay <= `limit_us`."""

    percentile: int
    limit_us: float

    def __post_init__(self) -> None:
        if self.percentile not in PERCENTILES:
            raise ValueError(
                f"latency percentile must be one of {', '.join(map(str, PERCENTILES))}, "
                f"got {self.percentile}"
            )
        if not (self.limit_us > 0 and math.isfinite(self.limit_us)):
            raise ValueError(f"latency limit must be a positive duration, got {self.limit_us} us")

    @classmethod
    def parse(cls, percentile: int, text: str) -> LatencyBudget:
        return cls(percentile, parse_duration_us(text))

    def describe(self) -> str:
        """E.g. 'p95 <= 10 ms'."""
        return f"p{self.percentile} <= {format_duration_us(self.limit_us)}"
