"""The study's pruner (tuner.pruning.SaturationPruner) on real in-memory Optuna studies."""

from __future__ import annotations

import optuna
import pytest

from tuner.budget import LatencyBudget
from tuner.duration import Duration
from tuner.pruning import PRUNE_MARGIN, SaturationPruner, best_feasible_value
from tuner.search_study import open_study
from tuner.search_types import SearchSettings


def study_with(*completed: tuple[float, float]) -> optuna.Study:
    """A study with our pruner and completed trials of (throughput, latency constraint)."""
    study = optuna.create_study(direction="maximize", pruner=SaturationPruner())
    for value, latency in completed:
        trial = study.ask()
        trial.set_constraint("latency", latency)
        study.tell(trial, value)
    return study


def reports(study: optuna.Study, *values: float) -> bool:
    """Report `values` as steps 0, 1, ... of a new trial; whether it should be pruned then."""
    trial = study.ask()
    for step, value in enumerate(values):
        trial.report(value, step)
    return trial.should_prune()


def test_a_trial_saturated_clearly_below_the_best_is_pruned() -> None:
    study = study_with((1000.0, -0.2))
    assert reports(study, 500.0, 800.0, 810.0)  # +1% on the last step: stopped growing


def test_a_trial_still_growing_is_not_pruned() -> None:
    study = study_with((1000.0, -0.2))
    assert not reports(study, 300.0, 500.0, 800.0)


def test_a_trial_within_the_margin_of_the_best_is_not_pruned() -> None:
    study = study_with((1000.0, -0.2))
    assert not reports(study, 920.0, 920.0)  # 8% below: could be noise
    assert reports(study, 880.0, 880.0)  # 12% below


def test_only_feasible_trials_set_the_bar() -> None:
    study = study_with((5000.0, 0.5), (600.0, -0.1))  # 5000/s was over the budget
    assert best_feasible_value(study) == 600.0
    assert not reports(study, 580.0, 580.0)
    assert reports(study, 400.0, 400.0)


def test_nothing_is_pruned_before_a_feasible_trial_or_on_one_value() -> None:
    assert not reports(study_with(), 10.0, 10.0)
    assert not reports(study_with((1000.0, 0.3)), 10.0, 10.0)
    assert not reports(study_with((1000.0, -0.2)), 10.0)


def test_the_margin_is_checked() -> None:
    assert 0 < PRUNE_MARGIN < 0.5
    with pytest.raises(ValueError, match="margin"):
        SaturationPruner(margin=1.0)


def test_the_tuners_studies_use_it() -> None:
    settings = SearchSettings(LatencyBudget(95, Duration.from_ms(10)), study_name="pruned")
    study = open_study(settings, optuna.samplers.RandomSampler(seed=0))
    assert isinstance(study.pruner, SaturationPruner)
