"""The search loop: Optuna's ask/tell behind one function."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable

import optuna
from optuna.trial import Trial, TrialState

from common.invariant import present
from tuner.candidate import Candidate
from tuner.duration import Duration
from tuner.samplers import FinishedRecords, make_sampler
from tuner.search_study import (
    AS_WRITTEN,
    CANDIDATE,
    KEY,
    MEASURING,
    OUTCOME,
    REUSED_FROM,
    SURPLUS,
    WAITING_FOR,
    WORKER,
    FixedSampler,
    Worker,
    best_of,
    counts,
    fail_stale_trials,
    heartbeat,
    open_study,
    tell_first,
)
from tuner.search_types import (
    ProgressEvent,
    ProgressKind,
    SearchResult,
    SearchSettings,
    TrialContext,
    TrialOutcome,
    TrialRecord,
)
from tuner.space import Space, grid

__all__ = [
    "Evaluate",
    "Progress",
    "ProgressEvent",
    "SearchResult",
    "SearchSettings",
    "TrialContext",
    "TrialOutcome",
    "TrialRecord",
    "run_search",
]

Evaluate = Callable[[Candidate, TrialContext], TrialOutcome]
Progress = Callable[[ProgressEvent], None]

_SEED_STRIDE = 7919  # parallel workers get seeds this far apart
_MAX_REPEATS = 25  # proposals in a row of measured candidates: the search has converged
_IN_FLIGHT_POLL_S = 0.25  # how often a trial waiting for another's measurement looks
_DECIDING_POLL_S = 0.05  # how often a worker looks whether earlier trials have decided


def run_search(
    space: Space,
    evaluate: Evaluate,
    settings: SearchSettings,
    progress: Progress | None = None,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> SearchResult:
    """Search `space` for the candidate with the highest throughput within the constraints.

    The study (`settings.storage`, `settings.study_name`) is created or resumed. Its first
    trial measures the model's config exactly as written (`space.as_written()`, user attribute
    "as_written"): with its parameters when it is a point of the space, else with none (the
    empty candidate: TPE learns nothing from it, the budget and the report compare with it).
    Each trial: ask -> a candidate (define-by-run over `space`, the priors of
    `space.prior_candidates()` enqueued first, then the sampler of `settings.method`, see
    `tuner.samplers`; in grid mode the next grid point not yet taken)
    -> `evaluate(candidate, context)` (a `TrialContext`) -> tell. Every trial is told:

    - "ok": COMPLETE with the throughput as value, and the constraints latency (p / limit - 1),
      accuracy (0 or 1) and, with `min_throughput`, throughput set on the trial, so that the
      constrained TPE sampler learns infeasibility while it searches.
    - "pruned": PRUNED, with the same constraints (and the throughput as intermediate value).
    - "failed", or `evaluate` raised an Exception: FAIL, the message kept.
    - KeyboardInterrupt / SystemExit during `evaluate`: FAIL with no outcome (so a resumed run
      measures that candidate again), then re-raised.

    `evaluate` runs only for a candidate the study has no outcome for: a candidate measured
    before (a resumed study, a repeated proposal, another worker) is told that outcome again
    and marked `reused_from`. The loop stops, checking before each trial, when the study holds
    `n_trials` measurements (resumed and other workers' trials count; reused and interrupted
    ones do not), when `time_budget` has run out or less of it is left than this call's
    trials took on average, when every candidate of the space has been measured, when
    25 proposals in a row were candidates measured already (converged), when the best has
    not grown by more than `patience_min_gain` over the last `patience` measured trials (not
    in grid mode), or in grid mode when no grid point is left.

    Several processes given the same storage and study name share the work: trials left
    RUNNING by a dead process are marked FAIL; a running trial counts toward `n_trials` once
    its worker decided to measure it (user attribute "measuring"), and a worker waits for the
    trials asked before its own to decide before it decides, so the study ends with exactly
    `n_trials` measurements; a trial asked beyond them is marked FAIL (user attribute
    "surplus") and not evaluated.

    `progress` receives a `ProgressEvent` at the start, around each trial of this call and at
    the end. The result lists every trial of the study and the best feasible one (highest
    throughput; ties to the lower latency).
    """
    return _SearchLoop(space, evaluate, settings, progress, clock).run()


class _SearchLoop:
    def __init__(
        self,
        space: Space,
        evaluate: Evaluate,
        settings: SearchSettings,
        progress: Progress | None,
        clock: Callable[[], float],
    ) -> None:
        self.space = space
        self.evaluate = evaluate
        self.settings = settings
        self.progress = progress
        self.clock = clock
        self.started = clock()
        self.durations: list[float] = []
        self.reused = 0
        self.measured = 0
        self.repeats = 0  # reused outcomes since the last measurement
        self.stale_checked: float | None = None
        self.grid = grid(space) if settings.mode == "grid" else []
        self.fixed = FixedSampler()
        self.finished = FinishedRecords(settings)
        self.study = open_study(settings, optuna.samplers.RandomSampler(seed=settings.seed))
        self.worker = Worker(self.study)
        self.study.sampler = self._sampler()

    def _sampler(self) -> optuna.samplers.BaseSampler:
        settings = self.settings
        seed = None if settings.seed is None else settings.seed + _SEED_STRIDE * self.worker.rank
        if settings.mode == "grid":
            return self.fixed
        return make_sampler(settings.method, self.space, settings, seed)

    def run(self) -> SearchResult:
        self._fail_stale_trials()
        self._enqueue_first_trials(self._records())
        self._emit("start")
        while True:
            self._fail_stale_trials()
            records = self._decided_records()
            reason = self._stop_reason(records)
            if reason:
                break
            if self.settings.mode == "grid" and not self._choose_grid_point(records):
                reason = "every grid point has been taken"
                break
            try:
                reason = self._trial(self.study.ask())
            except optuna.exceptions.UpdateFinishedTrialError:
                # Another worker took the trial for dead before this one claimed it.
                reason = ""
            if reason:
                break
        records = self._records()
        self._emit("end", records=records, stop_reason=reason)
        return SearchResult(
            study_name=self.settings.study_name,
            trials=[r for r in records if r.state != "WAITING"],
            best=best_of(records),
            stop_reason=reason,
            measured_here=self.measured,
            reused_here=self.reused,
        )

    def _fail_stale_trials(self, *, force: bool = False) -> None:
        # A dead worker's trial only needs noticing about as often as it can go stale, except
        # while a worker waits on it (force).
        now = self.clock()
        due = self.stale_checked is None or now - self.stale_checked >= self.settings.heartbeat_s
        if due or force:
            fail_stale_trials(
                self.study, self.settings.stale_after_s, claim_within_s=self.settings.claim_within_s
            )
            self.stale_checked = now

    def _records(self) -> list[TrialRecord]:
        return self.finished.records(self.study.get_trials(deepcopy=False))

    def _decided_records(self, trial: Trial | None = None) -> list[TrialRecord]:
        """The study's records once every running trial (every one before `trial`, when
        given) has decided whether it measures or reuses: until then whether it counts toward
        n_trials is unknown, and two workers asking at once could both take the last
        measurement. A decision takes a moment; a trial whose worker died before deciding is
        failed as stale (one never claimed, after `claim_within_s`). `trial` keeps its
        heartbeat while this waits."""

        def deciding(records: list[TrialRecord]) -> bool:
            before = math.inf if trial is None else trial.number
            return any(r.undecided and r.number < before for r in records)

        records = self._records()
        if not deciding(records):
            return records
        beating = heartbeat(trial, self.settings.heartbeat_s) if trial else contextlib.nullcontext()
        with beating:
            while deciding(records):
                time.sleep(_DECIDING_POLL_S)
                self._fail_stale_trials(force=True)
                records = self._records()
        return records

    def _stop_reason(self, records: list[TrialRecord]) -> str:
        n_trials = self.settings.n_trials
        if n_trials is not None and sum(counts(r) for r in records) >= n_trials:
            return f"{n_trials} trials done"
        left = self._time_left()
        if left is not None:
            if left <= 0:
                return "time budget spent"
            if self.durations and left < sum(self.durations) / len(self.durations):
                return "time budget spent (too little left for another trial)"
        measured = {r.candidate.key for r in records if r.candidate and r.outcome is not None}
        if len(measured) >= self.space.size:
            return "every candidate of the space has been measured"
        if self.settings.mode != "grid":
            return patience_stop(records, self.settings)
        return ""

    def _time_left(self) -> float | None:
        """Seconds left of the time budget (negative once it is spent)."""
        budget = self.settings.time_budget
        return None if budget is None else budget.s - (self.clock() - self.started)

    def _enqueue_first_trials(self, records: list[TrialRecord]) -> None:
        """The config as written (unless the study has it), then, for Optuna, the priors."""
        kept = [r for r in records if not r.interrupted]
        taken = {r.candidate.key for r in kept if r.candidate is not None}
        if not any(r.as_written for r in kept):
            as_written = self.space.as_written()
            self._enqueue(as_written, as_written=True)
            taken.add(as_written.key)
        if self.settings.mode != "optuna":
            return
        for candidate in self.space.prior_candidates():
            if candidate.key not in taken:
                self._enqueue(candidate)
                taken.add(candidate.key)

    def _choose_grid_point(self, records: list[TrialRecord]) -> bool:
        """Point the fixed sampler at a grid point nobody has taken; False when none is left."""
        taken = {
            r.candidate.key
            for r in records
            if r.candidate and (r.outcome is not None or r.state in ("RUNNING", "WAITING"))
        }
        free = [c for c in self.grid if c.key not in taken]
        if not free:
            # An enqueued trial (the config as written) is still to be asked.
            return any(r.state == "WAITING" for r in records)
        # Parallel workers start at different points so that they rarely pick the same one.
        self.fixed.params = self.space.params_for(free[min(self.worker.rank, len(free) - 1)])
        return True

    def _enqueue(self, candidate: Candidate, *, as_written: bool = False) -> None:
        attrs: dict[str, object] = {KEY: candidate.key, CANDIDATE: candidate.to_json()}
        if as_written:
            attrs[AS_WRITTEN] = True
        # The empty candidate (the config as written, outside the space) has no parameters.
        params = self.space.params_for(candidate) if len(candidate) else {}
        self.study.enqueue_trial(params, user_attrs=attrs)

    def _trial(self, trial: Trial) -> str:
        """Run one asked trial to its tell; a stop reason when it turned out to be surplus."""
        # Claimed at once: a trial asked and never claimed is failed by the next process.
        trial.set_user_attr(WORKER, self.worker.attrs())
        try:
            candidate = self._candidate_of(trial)
        except Exception as exc:  # e.g. a resumed study enqueued values this space lacks
            self._tell(trial, TrialOutcome.failed(f"cannot build a candidate: {exc}"))
            return ""
        trial.set_user_attr(KEY, candidate.key)
        trial.set_user_attr(CANDIDATE, candidate.to_json())
        records = self._decided_records(trial)
        n_trials = self.settings.n_trials
        earlier = [r for r in records if r.number < trial.number and counts(r)]
        if n_trials is not None and len(earlier) >= n_trials:
            trial.set_user_attr(SURPLUS, True)
            tell_first(self.study, trial, state=TrialState.FAIL)
            return f"{n_trials} trials done"
        previous = _measured(records, candidate, trial.number)
        if previous is None:
            previous, records = self._await_in_flight(trial, candidate, records)
        if previous is not None and previous.outcome is not None:
            trial.set_user_attr(REUSED_FROM, previous.number)
            self.reused += 1
            self.repeats += 1
            self._tell(trial, previous.outcome)
            self._emit("trial_end", trial_number=trial.number)
            if self.repeats >= _MAX_REPEATS:
                return f"converged ({_MAX_REPEATS} proposals in a row were measured already)"
            return ""
        self.repeats = 0
        trial.set_user_attr(MEASURING, True)
        self._emit("trial_start", records=records, trial_number=trial.number)
        began = self.clock()
        reporter = _Reporter(trial)
        context = TrialContext(trial.number, _best_outcome(records), reporter)
        outcome = self._evaluate(trial, candidate, context)
        self.durations.append(self.clock() - began)
        if self._tell(trial, outcome, reported=reporter.reported):
            self.measured += 1
        self._emit("trial_end", trial_number=trial.number)
        return ""

    def _await_in_flight(
        self, trial: Trial, candidate: Candidate, records: list[TrialRecord]
    ) -> tuple[TrialRecord | None, list[TrialRecord]]:
        """Wait while an earlier trial (another worker's) measures the same candidate, then
        answer its record, for this trial to reuse: a candidate is measured once however many
        workers propose it (workers that start together enqueue the same first trials). None
        when no earlier trial is measuring it, or the one waited for ended without an outcome
        (its worker died): this trial then measures it. The trial keeps its heartbeat and
        names the trial it waits for (user attribute "waiting_for")."""
        running = _in_flight(records, candidate, trial.number)
        if running is None:
            return None, records
        with heartbeat(trial, self.settings.heartbeat_s):
            waiting_for = None
            while running is not None:
                if waiting_for != running.number:
                    waiting_for = running.number
                    trial.set_user_attr(WAITING_FOR, waiting_for)
                time.sleep(_IN_FLIGHT_POLL_S)
                self._fail_stale_trials()
                records = self._records()
                running = _in_flight(records, candidate, trial.number)
        return _measured(records, candidate, trial.number), records

    def _candidate_of(self, trial: Trial) -> Candidate:
        """The asked trial's candidate: suggested over the space (an enqueued trial answers
        with its parameters), except the as-written trial outside the space, which has none."""
        if trial.user_attrs.get(AS_WRITTEN):
            candidate = Candidate.from_json(trial.user_attrs[CANDIDATE])
            if len(candidate) == 0:
                return candidate
        return self.space.suggest(trial)

    def _evaluate(self, trial: Trial, candidate: Candidate, context: TrialContext) -> TrialOutcome:
        try:
            with heartbeat(trial, self.settings.heartbeat_s):
                outcome = self.evaluate(candidate, context)
        except Exception as exc:
            return TrialOutcome.failed(f"evaluation raised {type(exc).__name__}: {exc}")
        except BaseException:
            with contextlib.suppress(Exception):
                self.study.tell(trial, state=TrialState.FAIL)
            raise
        if not isinstance(outcome, TrialOutcome) or outcome.status not in (
            "ok",
            "pruned",
            "failed",
        ):
            return TrialOutcome.failed(f"evaluation returned {outcome!r}, not a TrialOutcome")
        if outcome.status == "ok" and not math.isfinite(outcome.throughput):
            return TrialOutcome.failed(f"evaluation gave throughput {outcome.throughput}")
        return outcome

    def _tell(self, trial: Trial, outcome: TrialOutcome, *, reported: bool = False) -> bool:
        """Store the outcome and tell it; False when the trial was already finished. A pruned
        trial that reported no intermediate value reports its throughput as step 0."""
        try:
            trial.set_user_attr(OUTCOME, outcome.to_json())
            if outcome.status == "failed":
                return tell_first(self.study, trial, state=TrialState.FAIL)
            for name, value in self.settings.constraints(outcome).items():
                trial.set_constraint(name, value)
            if outcome.status == "ok":
                return tell_first(self.study, trial, outcome.throughput)
            if not reported and math.isfinite(outcome.throughput) and outcome.throughput > 0:
                trial.report(outcome.throughput, step=0)
            return tell_first(self.study, trial, state=TrialState.PRUNED)
        except optuna.exceptions.UpdateFinishedTrialError:
            # Another worker took this trial for dead (no heartbeat for stale_after_s).
            return False

    def _emit(
        self,
        kind: ProgressKind,
        *,
        records: list[TrialRecord] | None = None,
        trial_number: int | None = None,
        stop_reason: str = "",
    ) -> None:
        if self.progress is None:
            return
        if records is None:
            records = self._records()
        total = self.settings.n_trials
        if self.settings.mode == "grid":
            total = min(total, len(self.grid)) if total is not None else len(self.grid)
        trial = next((r for r in records if r.number == trial_number), None)
        self.progress(
            ProgressEvent(
                kind=kind,
                done=sum(counts(r) for r in records),
                total=total,
                elapsed_s=self.clock() - self.started,
                time_left=_left(self._time_left()),
                best=best_of(records),
                trial=trial,
                stop_reason=stop_reason,
            )
        )


def patience_stop(records: list[TrialRecord], settings: SearchSettings) -> str:
    """Why to stop when the best feasible throughput has not grown by more than
    `settings.patience_min_gain` over the last `settings.patience` measured trials of the
    study; "" to go on (no patience, too few trials, or nothing feasible before them)."""
    patience = settings.patience
    if patience is None:
        return ""
    done = [r for r in records if r.outcome is not None and r.reused_from is None]
    if len(done) <= patience:
        return ""
    before = best_of(done[:-patience])
    if before is None or before.outcome is None or before.outcome.throughput <= 0:
        return ""
    now = present(best_of(done), "a best before means a best now")
    best = present(now.outcome, "a best has an outcome")
    gain = best.throughput / before.outcome.throughput - 1.0
    if gain > settings.patience_min_gain:
        return ""
    return (
        f"the best ({best.throughput:.1f}/s) grew by {max(gain, 0.0):.1%} over the last "
        f"{patience} measured trials (patience: more than {settings.patience_min_gain:.0%})"
    )


def _in_flight(records: list[TrialRecord], candidate: Candidate, number: int) -> TrialRecord | None:
    """The first trial before `number` that is measuring `candidate` now."""
    for record in records:
        if record.number >= number:
            break
        if (
            record.state == "RUNNING"
            and record.candidate is not None
            and record.candidate.key == candidate.key
        ):
            return record
    return None


def _measured(records: list[TrialRecord], candidate: Candidate, number: int) -> TrialRecord | None:
    """The first trial (other than `number`) that holds an outcome for `candidate`."""
    for record in records:
        if (
            record.number != number
            and record.outcome is not None
            and record.candidate is not None
            and record.candidate.key == candidate.key
        ):
            return record
    return None


def _best_outcome(records: list[TrialRecord]) -> TrialOutcome | None:
    best = best_of(records)
    return None if best is None else best.outcome


class _Reporter:
    """A trial's intermediate values go to the study's pruner; True when it says stop."""

    def __init__(self, trial: Trial) -> None:
        self.trial = trial
        self.reported = False

    def __call__(self, step: int, throughput: float) -> bool:
        self.trial.report(throughput, step)
        self.reported = True
        return self.trial.should_prune()


def _left(seconds: float | None) -> Duration | None:
    return None if seconds is None else Duration.from_s(max(seconds, 0.0))
