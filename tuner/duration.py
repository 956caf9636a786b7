"""`Duration`: the one way the tuner carries a span of time between its modules (a latency
limit, a time budget, what is left of it), held in microseconds and parsed from what a user
types: "500us", "10ms", "1.5s" for latencies, "90s", "10m", "1.5h" for wall-clock budgets."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal

# Microseconds per unit.
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
DurationKind = Literal["latency", "wall_clock"]
# Latencies take us, ms and s and need a unit; wall-clock budgets take s, m, min and h, and a
# bare number is seconds.
UNITS: dict[DurationKind, tuple[str, ...]] = {
    "latency": ("us", "µs", "μs", "ms", "s"),
    "wall_clock": ("s", "m", "min", "h"),
}
_EXAMPLES: dict[DurationKind, str] = {
    "latency": "'500us', '10ms', '1.5s'",
    "wall_clock": "'90s', '10m', '1.5h'",
}
_NUMBER_AND_UNIT = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(\S*)\s*$")


@dataclass(frozen=True, slots=True, order=True)
class Duration:
    """A finite, non-negative span of time in microseconds (`us`); `ms` and `s` give it in
    the other units, `str()` in words ("1.5 ms")."""

    us: float

    def __post_init__(self) -> None:
        value = float(self.us)
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"a duration must be finite and not negative, got {self.us} us")
        object.__setattr__(self, "us", value)

    @classmethod
    def from_ms(cls, value: float) -> Duration:
        return cls(value * 1_000.0)

    @classmethod
    def from_s(cls, value: float) -> Duration:
        return cls(value * 1_000_000.0)

    @property
    def ms(self) -> float:
        return self.us / 1_000.0

    @property
    def s(self) -> float:
        return self.us / 1_000_000.0

    @classmethod
    def parse(cls, text: str, kind: DurationKind = "latency") -> Duration:
        """A positive duration from `text`: a latency ("500us", "10ms", "1.5s": us, ms or s,
        the unit required) or a wall-clock budget ("90s", "10m", "1.5h": s, m, min or h; a
        bare number is seconds). ValueError naming the value and the accepted units."""
        if kind not in UNITS:
            raise ValueError(f"unknown duration kind {kind!r} (latency or wall_clock)")
        units = UNITS[kind]
        accepted = f"{', '.join(units)}, e.g. {_EXAMPLES[kind]}"
        match = _NUMBER_AND_UNIT.match(text)
        given = match.group(2).lower() if match else ""
        if kind == "wall_clock" and match and not given:
            given = "s"
        if match is None or given not in units:
            raise ValueError(
                f"invalid duration '{text}': expected a positive number with a unit, {accepted}"
            )
        value = float(match.group(1)) * _MICROSECONDS[given]
        if value <= 0 or not math.isfinite(value):
            raise ValueError(f"invalid duration '{text}': must be greater than zero ({accepted})")
        return cls(value)

    def __str__(self) -> str:
        """In the largest unit that keeps the number >= 1: 1500 us -> '1.5 ms'."""
        if self.us >= 1_000_000:
            return f"{self.s:g} s"
        if self.us >= 1_000:
            return f"{self.ms:g} ms"
        return f"{self.us:g} us"

    def minus(self, other: Duration) -> Duration:
        """What is left of this once `other` is spent (zero at least)."""
        return Duration(max(self.us - other.us, 0.0))
