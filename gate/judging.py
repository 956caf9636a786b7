"""The verdict on one load: measure as many runs as the baseline did, compare the same statistic,
and re-measure a regressed load before believing it.

A re-measurement is a whole new set of the baseline's repeats, and the verdict is the statistic
(the median) of every run of the load so far: more evidence, never a choice of the luckiest
run. The best of several runs against the baseline's median would lean towards passing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gate.baseline_file import GateSettings, LoadPoint
from gate.compare import Check, Tolerance, checks
from gate.statistic import summarize


@dataclass(frozen=True, slots=True)
class Verdict:
    """The checks of one load, the statistic they compared, and the runs behind it."""

    checks: list[Check]
    point: LoadPoint
    runs: list[LoadPoint]
    attempts: int

    @property
    def regressed(self) -> bool:
        return any(c.regressed for c in self.checks)


def judge_load(
    model: str,
    baseline: LoadPoint,
    settings: GateSettings,
    tolerance: Tolerance,
    retries: int,
    measure: Callable[[], LoadPoint],
    pause: Callable[[], None] = lambda: None,
    say: Callable[[str], None] = lambda _text: None,
) -> Verdict:
    """Measure `settings.repeats` runs with `measure` and compare their `settings.statistic`
    with `baseline` (the same statistic of as many runs). While that regresses, and at most
    `retries` times, `pause`, measure another set and compare the statistic of all the runs."""
    runs: list[LoadPoint] = []
    attempts = 0
    while True:
        runs += [measure() for _ in range(settings.repeats)]
        attempts += 1
        point = summarize(runs, settings.statistic)
        found = checks(model, baseline, point, tolerance, len(runs), attempts, settings.statistic)
        verdict = Verdict(found, point, list(runs), attempts)
        if not verdict.regressed or attempts > retries:
            return verdict
        first = next(c for c in found if c.regressed)
        say(f"measuring again ({attempts + 1} of {retries + 1}): {first.describe()}")
        pause()
