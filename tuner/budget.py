"""The latency budget (a percentile and a limit) and the durations the tuner parses: "10ms",
"500us" for latencies, "90s", "10m" for wall-clock budgets."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

PERCENTILES = (90, 95, 99)

# Microseconds per unit. Latency budgets take us, ms and s; wall-clock budgets s, m, min and h.
_MICROSECONDS = {
    "us": 1.0,
    "µs": 1.0,
    "μs": 1.0,
    "ms": 1_000.0,
    "s": 1_000_000.0,
    "m": 60_000_000.0,
    "min": 60_000_000.0,
    "h": 3_600_000_000.0,
}
LATENCY_UNITS = ("us", "µs", "μs", "ms", "s")
WALL_CLOCK_UNITS = ("s", "m", "min", "h")
_EXAMPLES = {"us": "'500us', '10ms', '1.5s'", "s": "'90s', '10m', '1.5h'"}
_NUMBER_AND_UNIT = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(\S*)\s*$")


def parse_duration(text: str, unit: str = "us") -> float:
    """A positive duration in `unit`: microseconds ("us", for latency budgets: us, ms or s) or
    seconds ("s", for wall-clock budgets: s, m, min or h; a bare number is seconds).
    ValueError naming the value and the accepted units."""
    if unit not in _EXAMPLES:
        raise ValueError(f"unknown duration unit {unit!r} (us or s)")
    units = LATENCY_UNITS if unit == "us" else WALL_CLOCK_UNITS
    accepted = f"{', '.join(units)}, e.g. {_EXAMPLES[unit]}"
    match = _NUMBER_AND_UNIT.match(text)
    given = match.group(2).lower() if match else ""
    if unit == "s" and match and not given:
        given = "s"
    if match is None or given not in units:
        raise ValueError(
            f"invalid duration '{text}': expected a positive number with a unit, {accepted}"
        )
    value = float(match.group(1)) * _MICROSECONDS[given] / _MICROSECONDS[unit]
    if value <= 0 or not math.isfinite(value):
        raise ValueError(f"invalid duration '{text}': must be greater than zero ({accepted})")
    return value


def parse_duration_us(text: str) -> float:
    """A positive latency in microseconds from "500us", "10ms", "1.5s"."""
    return parse_duration(text, "us")


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
