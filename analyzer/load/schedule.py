"""Send schedules for request-rate and custom-interval modes.

A schedule is an endless iterator of delays in nanoseconds: the first is from the start to the
first send, each next one from the previous send. Times are precomputed from the rate (constant
or poisson with a seeded generator) or looped from `--request-intervals`, never adjusted to how
the server answers. A share (`index` of `count`) takes sends index, index+count, ... of the
whole schedule, so worker processes together send exactly the one-process schedule.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from analyzer.errors import AnalyzerError

DISTRIBUTIONS = ("constant", "poisson")


@dataclass(frozen=True, slots=True)
class ScheduleSpec:
    """How request-rate mode spaces its sends (everything but the rate itself)."""

    distribution: str = "constant"
    seed: int = 0
    intervals_us: tuple[int, ...] | None = None  # --request-intervals: overrides the rate
    index: int = 0  # this sender's share of the schedule
    count: int = 1


def send_delays_ns(rate: float, spec: ScheduleSpec) -> Iterator[int]:
    """This share's delays: to its first send, then between its consecutive sends."""
    times = _send_times_ns(rate, spec)
    previous = 0
    for position, time_ns in enumerate(times):
        if position % spec.count == spec.index:
            yield time_ns - previous
            previous = time_ns


def intervals_rate(intervals_us: Sequence[int]) -> float:
    """The mean request rate (per second) of a custom-interval schedule."""
    return len(intervals_us) * 1e6 / sum(intervals_us)


def read_intervals_file(path: str | Path) -> list[int]:
    """`--request-intervals FILE`: one interval in microseconds per line (blank lines skipped)."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise AnalyzerError(
            f"cannot read --request-intervals file {path}: {exc.strerror}"
        ) from None
    intervals: list[int] = []
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text:
            continue
        try:
            value = int(text)
        except ValueError:
            raise AnalyzerError(
                f"--request-intervals file {path}, line {number}: '{text}' is not a whole"
                " number of microseconds"
            ) from None
        if value < 0:
            raise AnalyzerError(
                f"--request-intervals file {path}, line {number}: intervals cannot be negative"
            )
        intervals.append(value)
    check_intervals(intervals, f"--request-intervals file {path}")
    return intervals


def check_intervals(intervals: Sequence[int], source: str) -> None:
    """AnalyzerError, naming `source`, unless the intervals add up to more than 0 us."""
    if not intervals or sum(intervals) <= 0:
        raise AnalyzerError(f"{source} needs at least one interval above 0 microseconds")


def check_distribution(distribution: str) -> None:
    """AnalyzerError unless `distribution` is constant or poisson."""
    if distribution not in DISTRIBUTIONS:
        raise AnalyzerError(
            f"--request-distribution must be constant or poisson, got '{distribution}'"
        )


def _send_times_ns(rate: float, spec: ScheduleSpec) -> Iterator[int]:
    """Send times of the whole schedule, from 0."""
    if spec.intervals_us is not None:
        check_intervals(spec.intervals_us, "the request intervals")
        return itertools.accumulate(
            (i * 1000 for i in itertools.cycle(spec.intervals_us)), initial=0
        )
    if rate <= 0:
        raise AnalyzerError(f"the request rate must be above 0, got {rate:g}")
    check_distribution(spec.distribution)
    if spec.distribution == "constant":
        period = 1e9 / rate
        return (round(k * period) for k in itertools.count())
    rng = random.Random(spec.seed)
    gaps = (rng.expovariate(rate) * 1e9 for _ in itertools.repeat(None))
    return (round(t) for t in itertools.accumulate(gaps, initial=0.0))
