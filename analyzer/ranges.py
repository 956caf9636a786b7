"""perf_analyzer's `start:end:step` range flags (--concurrency-range, --request-rate-range)."""

from __future__ import annotations

from analyzer.errors import AnalyzerError
from analyzer.profiler.sweep import SweepSpec


def parse_range(text: str, flag: str, mode: str, binary_search: bool = False) -> SweepSpec:
    """`start[:end[:step]]`; a missing end means `start` only, end 0 means no end.

    Concurrency values are whole numbers, request rates may be fractional."""
    parts = text.split(":")
    if len(parts) > 3:
        raise AnalyzerError(f"{flag} takes start:end:step (at most three values), got '{text}'")
    values: list[float] = []
    for part in parts:
        try:
            values.append(float(part.strip()))
        except ValueError:
            raise AnalyzerError(f"{flag} takes numbers as start:end:step, got '{text}'") from None
    start = values[0]
    end = values[1] if len(values) > 1 else None
    step = values[2] if len(values) > 2 else 1.0
    if any(v < 0 for v in values):
        raise AnalyzerError(f"{flag} values cannot be negative, got '{text}'")
    try:
        return SweepSpec(mode=mode, start=start, end=end, step=step, binary_search=binary_search)
    except ValueError as exc:
        raise AnalyzerError(f"{flag} '{text}': {exc}") from None
