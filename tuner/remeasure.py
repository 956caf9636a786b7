"""Re-measuring the search's top candidates before one is written.

A trial's figure comes from short windows taken once, at one moment of a busy machine; the
best of several such figures is biased upwards (the winner is often the luckiest). So, after
the search and on the same tuning server, the top distinct feasible candidates (the config as
written among them when it is feasible) are measured again, interleaved (A, B, C, A, B, C...,
`repeats` rounds, so that a slow spell of the machine hits them all alike), each at its own
operating point (the load its search chose) with full, stable windows. The winner is the best
median throughput among the candidates whose median latency percentile stays within the
budget, the config as written kept unless that median beats its every repeat
(`remeasure_result.WINNER_RULE`); the figures reported are these medians with their
range, so that the statistic that chose the winner is the one the report compares with the
config as written. A candidate whose median breaks the budget at its load is not dropped at
once: it is measured again, as many rounds, at the lower load its own figures say fits (the
search's load sat near the limit; this moment of the machine may be slower), and judged there.
The other way, a candidate with headroom (its median, scaled to one more client, within 0.9 of
the limit: its search stopped a level early on a noisy window) is measured again, as many
rounds, at the higher load its figures say fits, and judged at whichever of the two loads gives
the higher median throughput with its median within the budget. When the time left cannot hold
every round, the first pass's last rounds give way to the climbs: a candidate judged below the
load it serves loses to one measured at its full load, and that comparison says nothing about
the configs.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from analyzer.api import (
    AnalyzerError,
    LoadLevel,
    LoadOptions,
    Measurement,
    MeasureSettings,
)
from analyzer.api import SearchResult as LoadSearch
from analyzer.api import measure as measure_level
from tuner.budget import LatencyBudget
from tuner.candidate import Candidate
from tuner.defaults import DEFAULT_REMEASURE_REPEATS, DEFAULT_REMEASURE_TOP
from tuner.errors import TunerError
from tuner.evaluate import EvaluationSettings, trial_outcome
from tuner.remeasure_result import RemeasuredCandidate, RemeasureResult, beats_as_written
from tuner.run_schema import RunSummary
from tuner.search_types import TrialOutcome, TrialRecord
from tuner.server_control import TuningServer

# Windows twice the trial's (1 s for the default 500 ms), stable within perf_analyzer's 10%.
REMEASURE_MEASUREMENT = MeasureSettings(
    measurement_interval_ms=1000,
    stability_percentage=10.0,
    max_trials=8,
    warmup_request_count=20,
)
# What loading a candidate costs, roughly, for the time reserved before the search.
LOAD_ESTIMATE_S = 0.5

Loader = Callable[[Candidate], None]  # loads a candidate into the tuning server
Measurer = Callable[[int], Measurement]  # measures what is loaded at a concurrency


@dataclass(frozen=True, slots=True)
class RemeasureSettings:
    """`top` candidates (0: no re-measure), `repeats` interleaved rounds, `measure` windows."""

    top: int = DEFAULT_REMEASURE_TOP
    repeats: int = DEFAULT_REMEASURE_REPEATS
    measure: MeasureSettings = REMEASURE_MEASUREMENT

    def __post_init__(self) -> None:
        if self.top < 0:
            raise ValueError(f"--remeasure-top must be >= 0, got {self.top}")
        if self.repeats < 1:
            raise ValueError(f"--remeasure-repeats must be >= 1, got {self.repeats}")

    @classmethod
    def for_trial_interval(
        cls, top: int, repeats: int, trial_interval_ms: int
    ) -> RemeasureSettings:
        """Windows twice as long as the trials' (`--measurement-interval`)."""
        measure = replace(REMEASURE_MEASUREMENT, measurement_interval_ms=2 * trial_interval_ms)
        return cls(top, repeats, measure)

    @property
    def windows(self) -> str:
        m = self.measure
        return (
            f"{m.measurement_interval_ms} ms windows, the last {m.stability_window} within "
            f"{m.stability_percentage:g}% (at most {m.max_trials})"
        )

    def reserve_s(self) -> float:
        """About what the re-measure takes when each level settles in its first windows, one
        candidate measured again at a raised or lowered load included (the config as written
        usually has headroom at the load its search chose; without time for that climb's
        rounds, the first pass's last rounds go to it, and a one-round comparison keeps the
        config as written)."""
        m = self.measure
        per_measurement = (m.stability_window + 1) * m.measurement_interval_ms / 1000
        return (self.top + 1) * self.repeats * (per_measurement + LOAD_ESTIMATE_S)


@dataclass(frozen=True, slots=True)
class Remeasured:
    """The re-measure's result, and per candidate's trial its figures as a TrialOutcome
    (the medians over the repeats), for the summary's best and as written."""

    result: RemeasureResult
    outcomes: Mapping[int, TrialOutcome] = field(default_factory=dict)


def pick_top(trials: Sequence[TrialRecord], top: int) -> list[TrialRecord]:
    """The `top` distinct feasible configurations by the search's throughput, best first;
    the config as written takes the last place when it is feasible and not among them (the
    comparison with it is then re-measured too). A configuration measured twice (a resumed
    study, another worker) counts once, by its best trial."""
    if top <= 0:
        return []
    feasible = [t for t in trials if t.feasible and t.outcome is not None]
    feasible.sort(key=lambda t: (-_throughput(t), t.number))
    distinct: dict[str, TrialRecord] = {}
    for trial in feasible:
        key = _config_key(trial)
        # The config as written stands for its configuration (its label says so).
        if key not in distinct or trial.as_written:
            distinct[key] = trial
    ranked = list(distinct.values())
    chosen = ranked[:top]
    as_written = next((t for t in ranked if t.as_written), None)
    if top >= 2 and as_written is not None and as_written not in chosen:
        chosen[-1] = as_written
    return chosen


def remeasure(
    picked: Sequence[TrialRecord],
    load: Loader,
    measure: Measurer,
    budget: LatencyBudget,
    settings: RemeasureSettings,
    *,
    search_best: int | None,
    min_throughput: float | None = None,
    deadline: float | None = None,
    load_ceiling: int | None = None,
) -> Remeasured:
    """Measure `picked` again, interleaved, `settings.repeats` rounds (fewer when the next
    round would end past `deadline`, a time.monotonic() value; the first always runs), each
    at the concurrency its search chose, and judge them. A candidate with headroom is also
    measured at a higher load, at most `load_ceiling` (the highest concurrency any trial
    reached; by default the highest among `picked`)."""
    states = [_State(trial) for trial in picked]
    rounds = _Rounds(load, measure, budget, settings.repeats, deadline)
    ceiling = load_ceiling if load_ceiling is not None else highest_load(picked)
    rounds.run(states, keep_time_for=lambda: _climbers(states, budget, ceiling))
    climbing = _start_climbs(states, rounds, budget, ceiling)
    _measure_again(states, climbing, rounds, budget)
    judged = [judge(s.result(), budget, min_throughput) for s in states]
    winner = choose_winner(judged)
    outcomes = {s.trial.number: s.outcome(budget) for s in states if s.repeats.metrics}
    result = RemeasureResult(
        repeats=settings.repeats,
        rounds=rounds.first_pass_rounds or 0,
        windows=settings.windows,
        candidates=tuple(judged),
        winner=None if winner is None else winner.trial,
        search_best=search_best,
        note=_notes(rounds, states),
    )
    return Remeasured(result, outcomes)


def _notes(rounds: _Rounds, states: Sequence[_State]) -> str:
    """How the rounds ended, and which loads were lowered or raised, and why."""
    loads = [note for s in states for note in (s.backed_off, s.climbed)]
    return "; ".join(filter(None, [rounds.note, *loads]))


def highest_load(trials: Sequence[TrialRecord]) -> int:
    """The highest concurrency any of `trials` was operated at (1 when none says)."""
    loads = [t.outcome.metrics.get("concurrency", 1.0) for t in trials if t.outcome is not None]
    return max(1, int(max(loads, default=1.0)))


def _climbers(states: Sequence[_State], budget: LatencyBudget, ceiling: int) -> int:
    """How many candidates the figures so far say to measure again at a higher load."""
    return sum(s.climb_load(budget, ceiling) is not None for s in states)


def _start_climbs(
    states: Sequence[_State], rounds: _Rounds, budget: LatencyBudget, ceiling: int
) -> list[_State]:
    """The candidates whose first pass left headroom, set to measure at a higher load: a
    trial's load search may stop a level early on a noisy short window, and a candidate
    measured below what it serves loses to one measured at its full load. None when the
    time budget leaves no round for them (their note says so)."""
    climbing = [s for s in states if s.climb_load(budget, ceiling) is not None]
    if not rounds.has_time_for(len(climbing)):
        for state in climbing:
            state.climbed = f"{state.headroom(budget)}: no time left to measure it higher"
        return []
    for state in climbing:
        state.raise_load(budget, ceiling)
    return climbing


def _measure_again(
    states: Sequence[_State], climbing: Sequence[_State], rounds: _Rounds, budget: LatencyBudget
) -> None:
    """The climbs' rounds, interleaved with the first back-off's, then the back-offs down to
    the load that fits.

    A candidate whose median percentile breaks the budget at the load its search chose (that
    load sat near the limit, and this moment of the machine is slower) is measured again, as
    many rounds, at the load that its own figures say fits the budget: the config may still
    be the best one, served a little below the load the search reported. Once the time
    budget has cut a pass short, only the climbs it kept time for are measured."""
    while climbing or not rounds.note:
        over = [s for s in states if s.backs_off(budget)]
        for state in over:
            state.lower_load(budget)
        again = [s for s in states if s in over or s in climbing]
        if not again:
            return
        rounds.run(again)
        for state in climbing:
            state.settle_climb(budget)
        climbing = []


def judge(
    candidate: RemeasuredCandidate, budget: LatencyBudget, min_throughput: float | None = None
) -> RemeasuredCandidate:
    """`candidate` with `held` set: measured in every round it was asked for, its median
    latency percentile within the budget (a single slow repeat on a busy machine does not
    drop it; a config that is over the budget half of the time does), and its median
    throughput at least `min_throughput`."""
    if candidate.message:
        return replace(candidate, held=False)
    latency, throughput = candidate.latency, candidate.throughput
    if latency is None or throughput is None:
        return replace(candidate, held=False, message="dropped: not measured")
    if latency.median > budget.limit_us:
        return replace(
            candidate,
            held=False,
            message=f"dropped: median p{budget.percentile} {latency.median / 1000:.2f} ms "
            f"is over {budget.limit}",
        )
    if min_throughput is not None and throughput.median < min_throughput:
        return replace(
            candidate,
            held=False,
            message=f"dropped: median {throughput.median:,.1f} infer/s is under the minimum "
            f"{min_throughput:g}",
        )
    return replace(candidate, held=True, message="")


def choose_winner(candidates: Sequence[RemeasuredCandidate]) -> RemeasuredCandidate | None:
    """The held candidate with the best median throughput (on a tie, the earlier trial), but
    the config as written, when it held, unless that median beats every repeat of its own
    (`remeasure_result.beats_as_written`)."""
    held = [(c.throughput.median, -c.trial, c) for c in candidates if c.held and c.throughput]
    best = max(held, key=lambda item: item[:2], default=(0.0, 0, None))[2]
    as_written = next((c for _, _, c in held if c.as_written), None)
    if best is None or as_written is None or beats_as_written(best, as_written):
        return best
    return as_written


def server_measurer(
    server: TuningServer, evaluation: EvaluationSettings, settings: RemeasureSettings
) -> Measurer:
    """Measure what `server` has loaded, at a concurrency, as the trials' load does (the same
    protocol, inputs and shapes) with the re-measure's windows."""

    def measure(concurrency: int) -> Measurement:
        options = LoadOptions(
            url=server.url_for(evaluation.protocol),
            protocol=evaluation.protocol,
            model=server.model_name,
            input_data=[evaluation.input_data],
            shapes=dict(evaluation.shapes),
            worker_processes=1,
        )
        return measure_level(options, LoadLevel(concurrency=concurrency), settings.measure)

    return measure


def with_remeasure(summary: RunSummary, remeasured: Remeasured | None) -> RunSummary:
    """`summary` with the re-measure: its best is the winner (None when no candidate held
    the budget), and the best's and the as-written's figures are the re-measured medians
    where they were re-measured; the trials keep the search's own figures."""
    if remeasured is None:
        return summary
    result, outcomes = remeasured.result, remeasured.outcomes
    by_number = {t.number: t for t in summary.trials}
    best = by_number.get(result.winner) if result.winner is not None else None
    if best is not None and best.number in outcomes:
        best = replace(best, outcome=outcomes[best.number])
    as_written = summary.as_written
    if as_written is not None and as_written.number in outcomes:
        as_written = replace(as_written, outcome=outcomes[as_written.number])
    return replace(summary, best=best, as_written=as_written, remeasure=result)


class _Rounds:
    """Interleaved rounds over candidates: each loaded in turn and measured at its load."""

    def __init__(
        self,
        load: Loader,
        measure: Measurer,
        budget: LatencyBudget,
        repeats: int,
        deadline: float | None,
    ) -> None:
        self.load, self.measure, self.budget = load, measure, budget
        self.repeats, self.deadline = repeats, deadline
        self.first_pass_rounds: int | None = None
        self.note = ""  # set when the deadline cut the rounds short
        self.loaded: int | None = None
        self.measured_s = 0.0  # loading and measuring, over `measured` measurements
        self.measured = 0

    def has_time_for(self, count: int) -> bool:
        """Whether `count` more measurements, as long as those so far, end by the deadline."""
        if self.deadline is None or not self.measured:
            return True
        per_measurement = self.measured_s / self.measured
        return time.monotonic() + count * per_measurement <= self.deadline

    def run(self, states: Sequence[_State], keep_time_for: Callable[[], int] = lambda: 0) -> None:
        """`repeats` rounds (fewer when the next would end past the deadline, less the time of
        `keep_time_for()` more measurements, as long as those so far; the first always
        runs)."""
        started = time.monotonic()
        rounds = 0
        for round_index in range(self.repeats):
            if round_index and self.deadline is not None:
                per_round = (time.monotonic() - started) / round_index
                kept = keep_time_for()
                kept_s = kept * self.measured_s / max(self.measured, 1)
                if time.monotonic() + per_round + kept_s > self.deadline:
                    self._cut(round_index, kept)
                    break
            for state in states:
                if not state.message:
                    self._measure(state)
            rounds += 1
        if self.first_pass_rounds is None:
            self.first_pass_rounds = rounds

    def _cut(self, done: int, kept: int) -> None:
        """Say, once, that the time budget cut the rounds short."""
        if self.note:
            return
        again = "" if self.first_pass_rounds is None else " at the lowered or raised loads"
        self.note = f"the time budget allowed {done} of {self.repeats} rounds{again}"
        if kept:
            self.note += f", the rest of it kept to measure {kept} candidate(s) at a higher load"

    def _measure(self, state: _State) -> None:
        started = time.monotonic()
        try:
            if self.loaded != state.trial.number:
                self.loaded = None
                self.load(_candidate(state.trial))
                self.loaded = state.trial.number
            state.add(self.measure(state.concurrency), self.budget)
        except (TunerError, AnalyzerError) as exc:
            state.message = f"dropped: {exc}"
        self.measured_s += time.monotonic() - started
        self.measured += 1


# The load a candidate is measured again at, lower (over the budget) or higher (headroom):
# where its latency, which past saturation grows in proportion to the load, would sit at this
# share of the limit. Below saturation latency grows less than that, so the figure is cautious.
BACK_OFF_TARGET = 0.9
# A climb at most doubles the load: the proportional figure is a guess further out.
CLIMB_FACTOR = 2


@dataclass(slots=True)
class _Repeats:
    """A candidate's repeats at one load."""

    concurrency: int
    metrics: list[Mapping[str, float]] = field(default_factory=list)
    throughputs: list[float] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    stable: list[bool] = field(default_factory=list)

    def fitting_load(self, budget: LatencyBudget) -> int:
        """The concurrency at which its median latency, scaled with the load, sits at the
        target share of the limit."""
        latency = statistics.median(self.latencies)
        return int(self.concurrency * budget.limit_us * BACK_OFF_TARGET / latency)

    def describe(self, budget: LatencyBudget) -> str:
        """E.g. 'median 112.4 infer/s, p95 42.44 ms'."""
        throughput = statistics.median(self.throughputs)
        latency = statistics.median(self.latencies)
        return f"median {throughput:,.1f} infer/s, p{budget.percentile} {latency / 1000:.2f} ms"


class _State:
    """One candidate's repeats as they come."""

    def __init__(self, trial: TrialRecord) -> None:
        self.trial = trial
        outcome = trial.outcome
        metrics = outcome.metrics if outcome is not None else {}
        self.repeats = _Repeats(max(1, int(metrics.get("concurrency", 1))))
        self.message = ""
        self.backed_off = ""  # the last load it was over the budget at, in words
        self.climbed = ""  # the higher load it was measured at, and which one it is judged at
        self.below: _Repeats | None = None  # while climbing: its repeats at the load before

    @property
    def concurrency(self) -> int:
        return self.repeats.concurrency

    def add(self, measurement: Measurement, budget: LatencyBudget) -> None:
        if measurement.error_count:
            raise TunerError(f"{measurement.error_count} request(s) failed")
        level = float(measurement.concurrency)
        search = LoadSearch(best=measurement, max_level=level, measurements=[measurement])
        outcome, _ = trial_outcome(search, budget)
        self.repeats.metrics.append(outcome.metrics)
        self.repeats.throughputs.append(measurement.throughput)
        self.repeats.latencies.append(measurement.percentile_us(budget.percentile))
        self.repeats.stable.append(measurement.stable)

    def backs_off(self, budget: LatencyBudget) -> bool:
        """Measured in full, its median percentile over the budget, and a lower load left."""
        if self.message or not self.repeats.latencies or self.concurrency <= 1:
            return False
        return statistics.median(self.repeats.latencies) > budget.limit_us

    def lower_load(self, budget: LatencyBudget) -> None:
        """Start again at the load its figures say fits the budget (at least one lower)."""
        lower = max(1, min(self.concurrency - 1, self.repeats.fitting_load(budget)))
        latency = statistics.median(self.repeats.latencies)
        self.backed_off = (
            f"trial {self.trial.number}: median p{budget.percentile} "
            f"{latency / 1000:.2f} ms at concurrency {self.concurrency}, measured again at "
            f"{lower}"
        )
        self.repeats = _Repeats(lower)

    def climb_load(self, budget: LatencyBudget, ceiling: int) -> int | None:
        """The higher load its figures say fits, when at least one more client does (its
        median latency x (c + 1) / c within the target share of the limit), at most
        CLIMB_FACTOR x its load and `ceiling`; None when there is no such load."""
        if self.message or not self.repeats.latencies or self.below is not None:
            return None
        if not statistics.median(self.repeats.latencies) > 0:  # no figure to scale
            return None
        higher = min(self.repeats.fitting_load(budget), CLIMB_FACTOR * self.concurrency, ceiling)
        return higher if higher > self.concurrency else None

    def headroom(self, budget: LatencyBudget) -> str:
        """E.g. 'trial 0: median p95 42.44 ms at concurrency 4 (headroom)'."""
        latency = statistics.median(self.repeats.latencies)
        return (
            f"trial {self.trial.number}: median p{budget.percentile} {latency / 1000:.2f} ms "
            f"at concurrency {self.concurrency} (headroom)"
        )

    def raise_load(self, budget: LatencyBudget, ceiling: int) -> None:
        """Start again at the higher load, keeping the repeats at this one to fall back on."""
        higher = self.climb_load(budget, ceiling)
        if higher is None:
            return
        self.climbed = f"{self.headroom(budget)}, measured again at {higher}"
        self.below, self.repeats = self.repeats, _Repeats(higher)

    def settle_climb(self, budget: LatencyBudget) -> None:
        """Judged at the load with the higher median throughput whose median percentile is
        within the budget: the higher one only when it is both."""
        below, self.below = self.below, None
        if below is None:
            return
        why_not = self._climb_refused(below, budget)
        if why_not:
            self.repeats, self.message = below, ""
            self.climbed += f": judged at {below.concurrency} ({why_not})"
        else:
            self.climbed += (
                f": judged at {self.concurrency} ({self.repeats.describe(budget)}, against "
                f"{below.describe(budget)} at {below.concurrency})"
            )

    def _climb_refused(self, below: _Repeats, budget: LatencyBudget) -> str:
        """Why its repeats at the higher load do not count ("" when they do)."""
        higher = self.repeats
        if self.message:
            return f"at {higher.concurrency}: {self.message.removeprefix('dropped: ')}"
        if not higher.latencies:
            return f"not measured at {higher.concurrency}"
        figures = f"at {higher.concurrency} {higher.describe(budget)}"
        if statistics.median(higher.latencies) > budget.limit_us:
            return f"{figures}, over {budget.limit}"
        if statistics.median(higher.throughputs) <= statistics.median(below.throughputs):
            return f"{figures}, not more than {below.describe(budget)}"
        return ""

    def result(self) -> RemeasuredCandidate:
        outcome = self.trial.outcome
        return RemeasuredCandidate(
            trial=self.trial.number,
            key=_config_key(self.trial),
            as_written=self.trial.as_written,
            concurrency=self.concurrency,
            search_throughput=_throughput(self.trial),
            search_latency_us=outcome.latency_us if outcome is not None else None,
            throughputs=tuple(self.repeats.throughputs),
            latencies_us=tuple(self.repeats.latencies),
            stable=tuple(self.repeats.stable),
            message=self.message,
        )

    def outcome(self, budget: LatencyBudget) -> TrialOutcome:
        """The repeats as the search's outcome holds its figures: every figure the median of
        the repeats, the statistic the winner was chosen on (throughput) and the budget judged
        on (percentile), so that "best / as written" compares what decided the write."""
        repeats = self.repeats
        names = set().union(*(m.keys() for m in repeats.metrics))
        medians = {
            name: statistics.median(m[name] for m in repeats.metrics if name in m) for name in names
        }
        medians["concurrency"] = float(self.concurrency)
        base = self.trial.outcome or TrialOutcome("ok")
        return replace(
            base,
            status="ok",
            throughput=statistics.median(repeats.throughputs),
            latency_us=statistics.median(repeats.latencies),
            metrics=medians,
            message=(
                f"re-measured: the median throughput and percentile of "
                f"{len(repeats.throughputs)} interleaved repeats"
            ),
        )


def _throughput(trial: TrialRecord) -> float:
    return trial.outcome.throughput if trial.outcome is not None else 0.0


def _candidate(trial: TrialRecord) -> Candidate:
    return trial.candidate if trial.candidate is not None else Candidate()


def _config_key(trial: TrialRecord) -> str:
    return trial.candidate.key if trial.candidate is not None else ""
