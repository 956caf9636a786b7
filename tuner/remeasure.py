"""Re-measuring the search's top candidates before one is written.

A trial's figure comes from short windows taken once, at one moment of a busy machine; the
best of several such figures is biased upwards (the winner is often the luckiest). So, after
the search and on the same tuning server, the top distinct feasible candidates (the config as
written among them when it is feasible) are measured again, interleaved (A, B, C, A, B, C...,
`repeats` rounds, so that a slow spell of the machine hits them all alike), each at its own
operating point (the load its search chose) with full, stable windows. The winner is the best
median throughput among the candidates whose median latency percentile stays within the
budget (`remeasure_result.WINNER_RULE`); the figures reported are these medians with their
range, so that the statistic that chose the winner is the one the report compares with the
config as written. A candidate whose median breaks the budget at its load is not dropped at
once: it is measured again, as many rounds, at the lower load its own figures say fits (the
search's load sat near the limit; this moment of the machine may be slower), and judged there.
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
from tuner.remeasure_result import RemeasuredCandidate, RemeasureResult
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
        """About what the re-measure takes when each level settles in its first windows."""
        m = self.measure
        per_measurement = (m.stability_window + 1) * m.measurement_interval_ms / 1000
        return self.top * self.repeats * (per_measurement + LOAD_ESTIMATE_S)


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
) -> Remeasured:
    """Measure `picked` again, interleaved, `settings.repeats` rounds (fewer when the next
    round would end past `deadline`, a time.monotonic() value; the first always runs), each
    at the concurrency its search chose, and judge them."""
    states = [_State(trial) for trial in picked]
    rounds = _Rounds(load, measure, budget, settings.repeats, deadline)
    rounds.run(states)
    # A candidate whose median percentile breaks the budget at the load its search chose
    # (that load sat near the limit, and this moment of the machine is slower) is measured
    # again, as many rounds, at the load that its own figures say fits the budget: the config
    # may still be the best one, served a little below the load the search reported.
    while not rounds.note:
        over = [s for s in states if s.backs_off(budget)]
        if not over:
            break
        for state in over:
            state.lower_load(budget)
        rounds.run(over)
    judged = [judge(s.result(), budget, min_throughput) for s in states]
    winner = choose_winner(judged)
    outcomes = {s.trial.number: s.outcome(budget) for s in states if s.metrics}
    result = RemeasureResult(
        repeats=settings.repeats,
        rounds=rounds.first_pass_rounds or 0,
        windows=settings.windows,
        candidates=tuple(judged),
        winner=None if winner is None else winner.trial,
        search_best=search_best,
        note="; ".join(filter(None, [rounds.note, *(s.backed_off for s in states)])),
    )
    return Remeasured(result, outcomes)


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
    """The held candidate with the best median throughput (on a tie, the earlier trial)."""
    held = [(c.throughput.median, -c.trial, c) for c in candidates if c.held and c.throughput]
    return max(held, key=lambda item: item[:2], default=(0.0, 0, None))[2]


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

    def run(self, states: Sequence[_State]) -> None:
        """`repeats` rounds (fewer when the next would end past the deadline; the first
        always runs)."""
        started = time.monotonic()
        rounds = 0
        for round_index in range(self.repeats):
            if round_index and self.deadline is not None:
                per_round = (time.monotonic() - started) / round_index
                if time.monotonic() + per_round > self.deadline:
                    self.note = f"the time budget allowed {round_index} of {self.repeats} rounds"
                    break
            for state in states:
                if not state.message:
                    self._measure(state)
            rounds += 1
        if self.first_pass_rounds is None:
            self.first_pass_rounds = rounds

    def _measure(self, state: _State) -> None:
        try:
            if self.loaded != state.trial.number:
                self.loaded = None
                self.load(_candidate(state.trial))
                self.loaded = state.trial.number
            state.add(self.measure(state.concurrency), self.budget)
        except (TunerError, AnalyzerError) as exc:
            state.message = f"dropped: {exc}"


# The load a candidate over the budget is measured again at: where its latency, which past
# saturation grows in proportion to the load, would sit at this share of the limit.
BACK_OFF_TARGET = 0.9


class _State:
    """One candidate's repeats as they come."""

    def __init__(self, trial: TrialRecord) -> None:
        self.trial = trial
        outcome = trial.outcome
        metrics = outcome.metrics if outcome is not None else {}
        self.concurrency = max(1, int(metrics.get("concurrency", 1)))
        self.metrics: list[Mapping[str, float]] = []
        self.throughputs: list[float] = []
        self.latencies: list[float] = []
        self.stable: list[bool] = []
        self.message = ""
        self.backed_off = ""  # the last load it was over the budget at, in words

    def add(self, measurement: Measurement, budget: LatencyBudget) -> None:
        if measurement.error_count:
            raise TunerError(f"{measurement.error_count} request(s) failed")
        level = float(measurement.concurrency)
        search = LoadSearch(best=measurement, max_level=level, measurements=[measurement])
        outcome, _ = trial_outcome(search, budget)
        self.metrics.append(outcome.metrics)
        self.throughputs.append(measurement.throughput)
        self.latencies.append(measurement.percentile_us(budget.percentile))
        self.stable.append(measurement.stable)

    def backs_off(self, budget: LatencyBudget) -> bool:
        """Measured in full, its median percentile over the budget, and a lower load left."""
        if self.message or not self.latencies or self.concurrency <= 1:
            return False
        return statistics.median(self.latencies) > budget.limit_us

    def lower_load(self, budget: LatencyBudget) -> None:
        """Start again at the load its figures say fits the budget (at least one lower)."""
        latency = statistics.median(self.latencies)
        fitting = int(self.concurrency * budget.limit_us * BACK_OFF_TARGET / latency)
        lower = max(1, min(self.concurrency - 1, fitting))
        self.backed_off = (
            f"trial {self.trial.number}: median p{budget.percentile} "
            f"{latency / 1000:.2f} ms at concurrency {self.concurrency}, measured again at "
            f"{lower}"
        )
        self.concurrency = lower
        self.metrics, self.throughputs, self.latencies, self.stable = [], [], [], []

    def result(self) -> RemeasuredCandidate:
        outcome = self.trial.outcome
        return RemeasuredCandidate(
            trial=self.trial.number,
            key=_config_key(self.trial),
            as_written=self.trial.as_written,
            concurrency=self.concurrency,
            search_throughput=_throughput(self.trial),
            search_latency_us=outcome.latency_us if outcome is not None else None,
            throughputs=tuple(self.throughputs),
            latencies_us=tuple(self.latencies),
            stable=tuple(self.stable),
            message=self.message,
        )

    def outcome(self, budget: LatencyBudget) -> TrialOutcome:
        """The repeats as the search's outcome holds its figures: every figure the median of
        the repeats, the statistic the winner was chosen on (throughput) and the budget judged
        on (percentile), so that "best / as written" compares what decided the write."""
        names = set().union(*(m.keys() for m in self.metrics))
        medians = {
            name: statistics.median(m[name] for m in self.metrics if name in m) for name in names
        }
        medians["concurrency"] = float(self.concurrency)
        base = self.trial.outcome or TrialOutcome("ok")
        return replace(
            base,
            status="ok",
            throughput=statistics.median(self.throughputs),
            latency_us=statistics.median(self.latencies),
            metrics=medians,
            message=(
                f"re-measured: the median throughput and percentile of "
                f"{len(self.throughputs)} interleaved repeats"
            ),
        )


def _throughput(trial: TrialRecord) -> float:
    return trial.outcome.throughput if trial.outcome is not None else 0.0


def _candidate(trial: TrialRecord) -> Candidate:
    return trial.candidate if trial.candidate is not None else Candidate()


def _config_key(trial: TrialRecord) -> str:
    return trial.candidate.key if trial.candidate is not None else ""
