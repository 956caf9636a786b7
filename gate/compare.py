"""Comparing a load's runs with its baseline: the tolerance and the checks. Both sides are the
same statistic (the median) of their runs (see statistic.py)."""

from __future__ import annotations

from dataclasses import dataclass

from gate.baseline_file import MEDIAN, LoadPoint
from gate.statistic import describe_runs

THROUGHPUT = "throughput"
P95 = "p95"
METRICS = (THROUGHPUT, P95)


def parse_tolerance(text: str) -> float:
    """'5%' or '0.05' -> 0.05. A bare number of 1 or more is refused as ambiguous."""
    raw = text.strip()
    percent = raw.endswith("%")
    try:
        value = float(raw.rstrip("%").strip())
    except ValueError:
        raise ValueError(f"'{text}' is not a tolerance: write 5% or 0.05") from None
    if percent:
        value /= 100.0
    elif value >= 1:
        raise ValueError(f"'{text}' is ambiguous: write {value:g}% or {value / 100:g}")
    if not 0 <= value < float("inf"):
        raise ValueError(f"the tolerance must be 0 or more, not '{text}'")
    return value


def format_percent(fraction: float, signed: bool = False) -> str:
    """A fraction as a percentage for messages: 0.05 -> '5%'; `signed`, for a change: one
    decimal and its sign ('+4.2%')."""
    return f"{fraction * 100:+.1f}%" if signed else f"{fraction * 100:g}%"


@dataclass(frozen=True, slots=True)
class Tolerance:
    """The largest relative throughput fall and p95 rise that pass."""

    throughput: float
    p95: float

    def of(self, metric: str) -> float:
        return self.throughput if metric == THROUGHPUT else self.p95

    def describe(self) -> str:
        if self.throughput == self.p95:
            return format_percent(self.throughput)
        return f"throughput {format_percent(self.throughput)}, p95 {format_percent(self.p95)}"


@dataclass(frozen=True, slots=True)
class Check:
    """One metric of one model at one load: baseline against now, each `statistic` of its
    runs (`runs` now, measured in `attempts` sets of the baseline's repeats)."""

    model: str
    concurrency: int
    metric: str  # THROUGHPUT (higher is better) or P95 (lower is better)
    baseline: float
    current: float
    tolerance: float
    runs: int = 1
    attempts: int = 1
    statistic: str = MEDIAN

    @property
    def change(self) -> float:
        """Relative change, (current - baseline) / baseline."""
        return (self.current - self.baseline) / self.baseline

    @property
    def regressed(self) -> bool:
        if self.metric == THROUGHPUT:
            return self.change < -self.tolerance
        return self.change > self.tolerance

    @property
    def where(self) -> str:
        return f"{self.model} @ concurrency {self.concurrency}"

    def values(self) -> tuple[str, str, str, str]:
        """(label, unit, baseline, current) formatted for people."""
        if self.metric == THROUGHPUT:
            return "throughput", "infer/s", _count(self.baseline), _count(self.current)
        return "p95 latency", "ms", _ms(self.baseline), _ms(self.current)

    def describe(self) -> str:
        """'digits @ concurrency 4: throughput 5,120 -> 3,010 infer/s (-41.2%, tolerance 5%)'"""
        label, unit, before, after = self.values()
        text = (
            f"{self.where}: {label} {before} -> {after} {unit} "
            f"({format_percent(self.change, signed=True)}, "
            f"tolerance {format_percent(self.tolerance)})"
        )
        if self.runs > 1:
            text += f", {describe_runs(self.statistic, self.runs, self.attempts)}"
        return text

    def runs_cell(self) -> str:
        """'3', or '6 in 2 attempts' for a re-measured load."""
        return str(self.runs) + (f" in {self.attempts} attempts" if self.attempts > 1 else "")


def checks(
    model: str,
    baseline: LoadPoint,
    current: LoadPoint,
    tolerance: Tolerance,
    runs: int = 1,
    attempts: int = 1,
    statistic: str = MEDIAN,
) -> list[Check]:
    """Throughput and p95 of `current` against `baseline`: both must be the same statistic."""

    def check(metric: str, before: float, after: float) -> Check:
        return Check(
            model,
            baseline.concurrency,
            metric,
            before,
            after,
            tolerance.of(metric),
            runs,
            attempts,
            statistic,
        )

    return [
        check(THROUGHPUT, baseline.throughput, current.throughput),
        check(P95, baseline.p95_us, current.p95_us),
    ]


def _count(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:,.1f}"


def _ms(us: float) -> str:
    ms = us / 1000.0
    if ms >= 100:
        return f"{ms:,.0f}"
    return f"{ms:.1f}" if ms >= 10 else f"{ms:.2f}"
