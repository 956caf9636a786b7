"""The latency budget: a percentile of the request latency and the limit it must stay within."""

from __future__ import annotations

from dataclasses import dataclass

from tuner.duration import Duration

PERCENTILES = (90, 95, 99)


@dataclass(frozen=True, slots=True)
class LatencyBudget:
    """`percentile` (90, 95 or 99) of the request latency must stay <= `limit`."""

    percentile: int
    limit: Duration

    def __post_init__(self) -> None:
        if self.percentile not in PERCENTILES:
            raise ValueError(
                f"latency percentile must be one of {', '.join(map(str, PERCENTILES))}, "
                f"got {self.percentile}"
            )
        if not isinstance(self.limit, Duration) or self.limit.us <= 0:
            raise ValueError(f"latency limit must be a positive duration, got {self.limit}")

    @classmethod
    def parse(cls, percentile: int, text: str) -> LatencyBudget:
        """From the flag's text: LatencyBudget.parse(95, "10ms")."""
        return cls(percentile, Duration.parse(text, "latency"))

    @property
    def limit_us(self) -> float:
        return self.limit.us

    def describe(self) -> str:
        """E.g. 'p95 <= 10 ms'."""
        return f"p{self.percentile} <= {self.limit}"
