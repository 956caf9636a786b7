"""The search methods of `--search`: each an Optuna sampler, so that ask/tell, the study's
storage, resume and several workers work the same for all of them.

"climb" is ours: a best-first local search over the space's ordered choices, in the manner
of Model Analyzer's quick mode. Throughput moves smoothly along each tuned value (one more
instance, the next max_batch_size up, the next queue delay), so the best configuration is
usually a few single steps away from a good one. Each trial takes the best measured
candidate (the highest feasible throughput; without a feasible one, the one closest to the
limits) and measures one of its neighbours not measured yet (one decision moved to the
adjacent choice, or to another precision / batching on or off); when every neighbour of the
best is measured, the next best's. The priors (`Space.prior_candidates`) are its starting
points. `benchmarks/tuner_quality.py` compares the methods against the exhaustive grid.
"""

from __future__ import annotations

import importlib.util
import random
from collections.abc import Callable, Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.trial import FrozenTrial, TrialState

from common.invariant import present
from tuner.candidate import Candidate, ParamValue
from tuner.defaults import RECOMMENDED_SEARCH, SEARCH_METHODS
from tuner.search_study import KEY, quiet_experimental, record_of
from tuner.search_types import SearchError, SearchSettings, TrialRecord
from tuner.space import Space, snapping

METHODS = SEARCH_METHODS
RECOMMENDED = RECOMMENDED_SEARCH
_FIXED_PARAMS = "fixed_params"  # Optuna's system attribute of an enqueued trial
_RANDOM_TRIES = 200  # random walks tried for an unmeasured candidate when climbing is done


def make_sampler(
    method: str,
    space: Space,
    settings: SearchSettings,
    seed: int | None,
    *,
    find_spec: Callable[[str], object | None] = importlib.util.find_spec,
) -> optuna.samplers.BaseSampler:
    """The sampler of `method` (any of METHODS but "grid"); SearchError naming `--search`
    for an unknown method or one whose packages are missing (`find_spec` looks them up)."""
    if method == "optuna":
        method = RECOMMENDED
    startup = settings.n_startup_trials
    if startup is None:
        n = settings.n_trials
        startup = 10 if n is None else max(4, min(10, n // 3))
    with quiet_experimental():
        if method == "climb":
            return ClimbSampler(space, settings, seed)
        if method in ("tpe", "tpe-flat"):
            return optuna.samplers.TPESampler(
                seed=seed,
                n_startup_trials=startup,
                multivariate=True,
                group=method == "tpe",
                constant_liar=True,
            )
        if method == "gp":
            missing = [m for m in ("torch", "scipy") if find_spec(m) is None]
            if missing:
                raise SearchError(
                    f"--search gp needs {' and '.join(missing)}, which is not installed "
                    "(pip install torch scipy), or choose another --search"
                )
            return optuna.samplers.GPSampler(
                seed=seed, n_startup_trials=startup, warn_independent_sampling=False
            )
        if method == "random":
            return optuna.samplers.RandomSampler(seed=seed)
        if method == "qmc":
            return optuna.samplers.QMCSampler(seed=seed, warn_independent_sampling=False)
    known = ", ".join(m for m in METHODS if m != "grid")
    raise SearchError(f"--search {method!r} is not a sampler (choose from {known})")


class FinishedRecords:
    """Trials as records, each finished trial read once (a finished trial no longer
    changes): reading every trial again at each ask would grow with the square of them."""

    def __init__(self, settings: SearchSettings) -> None:
        self.settings = settings
        self._finished: dict[int, TrialRecord] = {}

    def records(self, trials: Sequence[FrozenTrial]) -> list[TrialRecord]:
        found = []
        for trial in trials:
            record = self._finished.get(trial.number)
            if record is None:
                record = record_of(trial, self.settings)
                if trial.state.is_finished():
                    self._finished[trial.number] = record
            found.append(record)
        return found


class ClimbSampler(optuna.samplers.BaseSampler):
    """Best-first local search (see the module docstring). Enqueued trials (the config as
    written, the priors) keep their parameters; when nothing is left to climb, it proposes a
    random candidate not measured yet."""

    def __init__(self, space: Space, settings: SearchSettings, seed: int | None) -> None:
        self.space = space
        self.settings = settings
        self.rng = random.Random(seed)
        self.fallback = optuna.samplers.RandomSampler(seed=seed)
        self._planned: dict[int, dict[str, ParamValue]] = {}
        self._records = FinishedRecords(settings)
        self._neighbours: dict[Candidate, list[Candidate]] = {}

    def reseed_rng(self) -> None:
        self.rng = random.Random()
        self.fallback.reseed_rng()

    def infer_relative_search_space(
        self, study: optuna.Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        return {}

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        return {}

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        if _FIXED_PARAMS in trial.system_attrs:
            return
        candidate = self.next_candidate(study.get_trials(deepcopy=False))
        if candidate is not None:
            self._planned[trial.number] = self.space.params_for(candidate)

    def sample_independent(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        planned = self._planned.get(trial.number, {})
        if (
            param_name in planned
            and isinstance(param_distribution, CategoricalDistribution)
            and planned[param_name] in param_distribution.choices
        ):
            return planned[param_name]
        return self.fallback.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        self._planned.pop(trial.number, None)

    def next_candidate(self, trials: Sequence[FrozenTrial]) -> Candidate | None:
        """The unmeasured neighbour of the best measured candidate that has one; else a random
        unmeasured candidate; None when none was found."""
        records = self._records.records(trials)
        # measured, being measured or queued (another worker's trial, a prior)
        taken = {
            _key(trial)
            for trial, record in zip(trials, records, strict=True)
            if record.outcome is not None or trial.state in (TrialState.RUNNING, TrialState.WAITING)
        }
        for record in sorted(
            (r for r in records if _climbable(r)), key=self._standing, reverse=True
        ):
            candidate = present(record.candidate, "a climbable trial has a candidate")
            free = [c for c in self.neighbours(candidate) if c.key not in taken]
            if free:
                return self.rng.choice(free)
        for _ in range(_RANDOM_TRIES):
            candidate = self.space.walk(lambda _f, _n, choices: self.rng.choice(choices))
            if candidate.key not in taken:
                return candidate
        return None

    def neighbours(self, candidate: Candidate) -> list[Candidate]:
        """The candidates one decision away: an ordered value (instances, threads,
        max_batch_size, queue delay, preferred size) moved to the adjacent choice, an unordered
        one (precision, batching) to any other. Values that then stop being valid are snapped
        to the nearest valid one; a value the candidate does not have (batching was off) comes
        from the first prior (the model's own config)."""
        cached = self._neighbours.get(candidate)
        if cached is not None:
            return cached
        decisions: list[tuple[str, ParamValue, Sequence[ParamValue]]] = []
        wanted = self._defaults() | dict(candidate)

        def record(field: str, name: str, choices: Sequence[ParamValue]) -> ParamValue:
            value = snapping(wanted)(field, name, choices)
            decisions.append((field, value, choices))
            return value

        self.space.walk(record)
        found: dict[Candidate, None] = {}
        for field, value, choices in decisions:
            for other in _moves(value, choices):
                moved = self.space.walk(snapping(wanted | {field: other}))
                if moved != candidate:
                    found[moved] = None
        self._neighbours[candidate] = list(found)
        return self._neighbours[candidate]

    def _defaults(self) -> dict[str, ParamValue]:
        priors = self.space.prior_candidates()
        return dict(priors[0]) if priors else {}

    def _standing(self, record: TrialRecord) -> tuple[bool, float, float, int]:
        """Feasible before infeasible; then how little the limits are exceeded (nothing for
        a feasible one, or one pruned within them), then throughput; earlier trials first
        among equals."""
        outcome = present(record.outcome, "only finished trials are ranked")
        over = 0.0
        if not record.feasible:
            over = sum(max(v, 0.0) for v in self.settings.constraints(outcome).values())
        return (record.feasible, -over, outcome.throughput, -record.number)


def _moves(value: ParamValue, choices: Sequence[ParamValue]) -> list[ParamValue]:
    if value not in choices:
        return []
    ordered = all(c is None or (isinstance(c, int) and not isinstance(c, bool)) for c in choices)
    if not ordered:
        return [c for c in choices if c != value]
    at = list(choices).index(value)
    return [choices[i] for i in (at - 1, at + 1) if 0 <= i < len(choices)]


def _key(trial: FrozenTrial) -> str:
    return str(trial.user_attrs.get(KEY, ""))


def _climbable(record: TrialRecord) -> bool:
    """Measured in the space (not failed, not the empty as-written candidate)."""
    return (
        record.outcome is not None
        and record.state in ("COMPLETE", "PRUNED")
        and record.candidate is not None
        and len(record.candidate) > 0
    )
