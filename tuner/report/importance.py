"""Parameter importances of a model's study (optuna.importance), or why there are none."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import optuna
from optuna.trial import TrialState

STUDY_FILE = "study.db"
MIN_COMPLETED_TRIALS = 3  # below this optuna returns equal shares, which would mislead


@dataclass(frozen=True, slots=True)
class Importances:
    """Importance of each parameter for the objective (throughput), largest first; empty
    with `reason` saying why when they cannot be computed."""

    values: dict[str, float] = field(default_factory=dict)
    completed: int = 0
    reason: str = ""


def study_importances(folder: Path, study_name: str) -> Importances:
    """Load the study `study_name` from `folder`/study.db and rank its parameters."""
    path = folder / STUDY_FILE
    if not path.is_file():
        return Importances(reason=f"No {STUDY_FILE} in {folder} (the study was kept elsewhere).")
    if not study_name:
        return Importances(reason="The summary names no study.")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.load_study(study_name=study_name, storage=f"sqlite:///{path.resolve()}")
    except Exception as exc:  # unknown name, locked or foreign file: the report still renders
        return Importances(reason=f"The study '{study_name}' cannot be loaded from {path}: {exc}")
    return importances(study)


def importances(study: optuna.Study) -> Importances:
    """Rank the study's parameters from its completed trials; empty with the reason when
    there are too few trials, they all gave the same throughput, or optuna cannot rank them."""
    completed = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    count = len(completed)
    if count < MIN_COMPLETED_TRIALS:
        return Importances(
            completed=count,
            reason=f"Parameter importances need at least {MIN_COMPLETED_TRIALS} completed "
            f"trials; this study has {count}.",
        )
    if len({t.value for t in completed}) < 2:
        return Importances(completed=count, reason="Every completed trial has the same throughput.")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "some regimes have less than 2 trials"
            values = optuna.importance.get_param_importances(study)
    except (RuntimeError, ValueError, ZeroDivisionError) as exc:
        return Importances(completed=count, reason=f"optuna could not rank the parameters: {exc}")
    values = {k: v for k, v in values.items() if math.isfinite(v)}
    if not values:
        return Importances(completed=count, reason="optuna found no parameter to rank.")
    return Importances(values=values, completed=count)
