"""The study's pruner: stop a trial whose throughput stopped growing well below the best.

A trial's evaluation reports, per load step of its first pass, the best throughput within the
budget so far (`TrialContext.report`), and once more when that pass is done. Throughput rises
with load until the server saturates, so once a step adds (almost) nothing the trial's
ceiling is known: when it is clearly below the best feasible trial of the study, measuring it
further with full windows cannot change the winner.
"""

from __future__ import annotations

import optuna
from optuna.trial import FrozenTrial, TrialState

from analyzer.api import SATURATION_MIN_GAIN

# "Clearly below": the first pass's short windows are noisy (a few percent on a quiet machine,
# more on a busy one), and its ceiling is a maximum over levels while the best trial's value is
# measured at its operating point; a 10% margin keeps that noise from pruning a winner.
PRUNE_MARGIN = 0.10


class SaturationPruner(optuna.pruners.BasePruner):
    """Prunes a trial once its last reported value gained less than `min_gain` over its best
    earlier one (its throughput stopped growing) and its best value is below `1 - margin`
    times the best value of the study's feasible completed trials (all constraints <= 0).
    A trial with fewer than two reported values, or a study with no feasible completed
    trial, is never pruned."""

    def __init__(self, margin: float = PRUNE_MARGIN, min_gain: float = SATURATION_MIN_GAIN):
        if not 0 <= margin < 1:
            raise ValueError(f"the pruning margin must be within [0, 1), not {margin}")
        if min_gain < 0:
            raise ValueError(f"the minimum gain cannot be negative, not {min_gain}")
        self.margin = margin
        self.min_gain = min_gain

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        values = [value for _, value in sorted(trial.intermediate_values.items())]
        if len(values) < 2:
            return False
        if values[-1] > (1 + self.min_gain) * max(values[:-1]):
            return False  # still growing
        best = best_feasible_value(study)
        return best is not None and max(values) < (1 - self.margin) * best


def best_feasible_value(study: optuna.Study) -> float | None:
    """The highest value among the study's completed trials within every constraint."""
    values = [
        trial.value
        for trial in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if trial.value is not None and all(v <= 0 for v in trial.constraints.values())
    ]
    return max(values, default=None)
