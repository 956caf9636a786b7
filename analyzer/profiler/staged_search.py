"""`search_staged`: the highest load within a latency limit, measured in two fidelities.

What is known of the curve: throughput rises with load until the server saturates, and past
that more load adds only queueing; the budget judges the latency percentile at the point
where a config is operated (`search.operating_point`: the lowest load that reaches
`SATURATION_SHARE` of the best throughput within the limit). So:

1. **First pass, short windows** (`scout`). From `start` (where a similar config saturated,
   or 1): while the level passes, double it until throughput stopped growing
   (`throughput_saturated`), the limit is crossed, or `max_level`; when `start` itself does
   not pass, halve it until a level does. Between the last passing and the first failing
   level, at most `max_binary_steps` binary steps, and only when the throughput was still
   growing there (past saturation a level in between adds nothing). A scouted level passes on
   its percentile and errors alone: short windows need not settle. A level over the limit
   while doubling or halving is scouted once more before it bounds the search (a short window
   can catch a hiccup of a busy machine, and a false crossing there would halve the ceiling);
   the second measurement decides. A binary step is scouted once (a false fail there only
   moves the boundary by a step).
2. **Report.** After each passing scouted level, `report(step, ceiling)` with the best
   throughput within the limit so far, and once more when the first pass is done; True stops
   the search there (`stopped_early`): the caller has seen enough (it cannot win).
3. **Operating point.** The lowest passing scouted level that reaches `SATURATION_SHARE` of
   the ceiling; while nothing was scouted below it, half of it is scouted too.
4. **Full windows** (`confirm`) only there: the budget is never judged on a short window.
   When the operating point does not pass, the passing scouted levels below it (then halves,
   down to 1) are confirmed in turn; when it passes with less than `SATURATION_SHARE` of the
   scouted ceiling, the next passing scouted level above it is confirmed as well, and when
   that one does not pass, the level halfway between them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from analyzer.measurement import Measurement
from analyzer.profiler.level import LevelRun
from analyzer.profiler.search import (
    FULL,
    SATURATION_MIN_GAIN,
    SATURATION_SHARE,
    SCOUT,
    SearchResult,
    SearchStep,
    StepReport,
    check_range,
    passes,
    throughput_saturated,
    timed,
    why_not,
)
from analyzer.profiler.sweep import CONCURRENCY, MeasureLevel, SweepSpec
from common.invariant import present


@dataclass(frozen=True, slots=True)
class StagedLimits:
    """Where a staged search looks and what passes (see `search_staged`)."""

    latency_limit_us: float
    percentile: int = 95
    mode: str = CONCURRENCY
    start: int = 1
    max_level: int = 1024
    max_binary_steps: int = 5

    def __post_init__(self) -> None:
        check_range(self.mode, self.start, self.max_level)


async def search_staged(
    scout: MeasureLevel,
    confirm: MeasureLevel,
    limits: StagedLimits,
    report: StepReport | None = None,
) -> SearchResult:
    """Run the two-fidelity search (see the module docstring): `scout` measures a level with
    short windows, `confirm` with full ones (settling retries included)."""
    search = _Staged(scout, confirm, limits, report)
    await search.first_pass()
    if search.stopped:
        return search.result()
    await search.lower_operating_point()
    await search.confirm_operating_point()
    return search.result()


@dataclass(slots=True)
class _Staged:
    scout: MeasureLevel
    confirm: MeasureLevel
    limits: StagedLimits
    report: StepReport | None
    spec: SweepSpec = field(init=False)
    scouted: dict[int, LevelRun] = field(default_factory=dict)
    full: dict[int, LevelRun] = field(default_factory=dict)
    steps: list[SearchStep] = field(default_factory=list)
    reports: int = 0
    stopped: bool = False
    reason: str = ""

    def __post_init__(self) -> None:
        self.spec = SweepSpec(mode=self.limits.mode, start=self.limits.start)

    # -- the first pass ------------------------------------------------------------------

    def scout_passes(self, run: LevelRun) -> bool:
        m = run.measurement
        return (
            m is not None
            and not run.failure
            and m.error_count == 0
            and m.percentile_us(self.limits.percentile) <= self.limits.latency_limit_us
        )

    def passing_scouted(self) -> dict[int, float]:
        """Passing scouted level -> its throughput."""
        return {
            level: run.measurement.throughput
            for level, run in self.scouted.items()
            if run.measurement is not None and self.scout_passes(run)
        }

    def ceiling(self) -> float:
        return max(self.passing_scouted().values(), default=0.0)

    async def scout_at(self, level: int, tries: int = 2) -> bool:
        if level not in self.scouted:
            for _ in range(tries):
                run, step = await timed(
                    self.scout, self.spec, level, SCOUT, self.scout_passes, self.limits.percentile
                )
                self.scouted[level] = run
                self.steps.append(step)
                if step.passed or run.measurement is None or run.measurement.error_count:
                    break
            if step.passed:
                self.tell_ceiling()
        return self.scout_passes(self.scouted[level])

    def tell_ceiling(self) -> None:
        if self.report is None or self.stopped:
            return
        ceiling = self.ceiling()
        self.stopped = bool(self.report(self.reports, ceiling))
        self.reports += 1
        if self.stopped:
            self.reason = (
                f"stopped after the first pass: its best throughput within the limit was "
                f"{ceiling:.1f} infer/s"
            )

    async def first_pass(self) -> None:
        limits = self.limits
        level = limits.start
        last_pass: int | None = None
        first_fail: int | None = None
        if await self.scout_at(level):
            last_pass = level
            climbed = [self.passing_scouted()[level]]
            while not self.stopped and not throughput_saturated(climbed):
                if level >= limits.max_level:
                    break
                level = min(level * 2, limits.max_level)
                if not await self.scout_at(level):
                    first_fail = level
                    break
                last_pass = level
                climbed.append(self.passing_scouted()[level])
        else:
            first_fail = level
            while level > 1 and not self.stopped:
                level //= 2
                if await self.scout_at(level):
                    last_pass = level
                    break
                first_fail = level
        if last_pass is not None and first_fail is not None and self.growing_at(last_pass):
            await self.bisect(last_pass, first_fail)
        if self.ceiling() > 0:
            self.tell_ceiling()  # the first pass is done: its ceiling will not grow

    def growing_at(self, level: int) -> bool:
        """Whether throughput still grew on the way to `level` (unknown counts as growing)."""
        passing = self.passing_scouted()
        below = [lv for lv in passing if lv < level]
        if not below:
            return True
        return passing[level] >= (1 + SATURATION_MIN_GAIN) * passing[max(below)]

    async def bisect(self, low: int, high: int) -> None:
        for _ in range(self.limits.max_binary_steps):
            middle = (low + high) // 2
            if middle in (low, high) or self.stopped:
                return
            if await self.scout_at(middle, tries=1):
                low = middle
            else:
                high = middle

    # -- the operating point ------------------------------------------------------------

    def scouted_point(self) -> int:
        """The lowest passing scouted level at `SATURATION_SHARE` of the ceiling; the lowest
        scouted level when none passed."""
        passing = self.passing_scouted()
        if not passing:
            return min(self.scouted)
        top = max(passing.values())
        return min(level for level, value in passing.items() if value >= SATURATION_SHARE * top)

    async def lower_operating_point(self) -> None:
        point = self.scouted_point()
        while point > 1 and not any(level < point for level in self.scouted):
            if not await self.scout_at(point // 2):
                return
            if self.scouted_point() != point // 2:
                return
            point //= 2

    async def confirm_at(self, level: int) -> bool:
        run, step = await timed(
            self.confirm, self.spec, level, FULL, self.full_passes, self.limits.percentile
        )
        self.full[level] = run
        self.steps.append(step)
        return step.passed

    def full_passes(self, run: LevelRun) -> bool:
        return passes(run, self.limits.latency_limit_us, self.limits.percentile)

    async def confirm_operating_point(self) -> None:
        point = self.scouted_point()
        passing = self.passing_scouted()
        if await self.confirm_at(point):
            confirmed = present(self.full[point].measurement, "a confirmed level was measured")
            higher = [level for level in passing if level > point]
            if higher and confirmed.throughput < SATURATION_SHARE * self.ceiling():
                above = min(higher)
                middle = (point + above) // 2
                if not await self.confirm_at(above) and middle not in (point, above):
                    await self.confirm_at(middle)  # one binary step with full windows
            return
        level = point
        while level > 1:
            below = [lv for lv in passing if lv < level]
            level = max(below) if below else level // 2
            if await self.confirm_at(level):
                return

    # -- the result ---------------------------------------------------------------------

    def result(self) -> SearchResult:
        limits = self.limits
        confirmed = [
            (level, run.measurement)
            for level, run in self.full.items()
            if run.measurement is not None and self.full_passes(run)
        ]
        best = max((m for _, m in confirmed), key=lambda m: (m.throughput, -m.level), default=None)
        reason = self.reason or self.describe(best)
        return SearchResult(
            best=best,
            max_level=float(max(level for level, _ in confirmed)) if confirmed else None,
            measurements=_measured(self.full),
            reason=reason,
            latency_limit_us=limits.latency_limit_us,
            percentile=limits.percentile,
            scouted=_measured(self.scouted),
            stopped_early=self.stopped,
            steps=list(self.steps),
        )

    def describe(self, best: Measurement | None) -> str:
        if best is not None:
            return (
                f"operated at {best.level:g}: the lowest level within the limit at "
                f"{SATURATION_SHARE:.0%} of the best throughput of a first pass over "
                f"{len(self.scouted)} levels, confirmed with full windows"
            )
        limits = self.limits
        return "even the lowest level does not pass: " + "; ".join(
            why_not(self.full[level], limits.latency_limit_us, limits.percentile)
            for level in sorted(self.full)
        )


def _measured(runs: dict[int, LevelRun]) -> list[Measurement]:
    return [run.measurement for run in runs.values() if run.measurement is not None]
