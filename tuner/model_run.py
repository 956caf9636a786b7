"""Tuning one model on its own: a group of one (`tuner.group_run`), each trial measured on the
model itself, the top candidates re-measured, the best config written back."""

from __future__ import annotations

from tuner.budget import LatencyBudget
from tuner.defaults import DEFAULT_TRIALS
from tuner.duration import Duration
from tuner.evaluate import EvaluationSettings
from tuner.group_evaluate import GroupEvaluator, measure_served_model
from tuner.group_members import Member
from tuner.group_run import Group, tune_group
from tuner.run import Hooks, TuneOptions
from tuner.run_schema import RunSummary
from tuner.server_control import TuningServer


def model_group(options: TuneOptions, model: str) -> Group:
    """What tuning `model` alone is to the tuning core."""
    return Group(
        name=model,
        models=(model,),
        intro="",
        compose=lambda spaces, _platform: spaces[0],
        measure=measure_served_model(options.budget),
        alone=True,
        remeasure=True,
        default_trials=DEFAULT_TRIALS,
    )


def tune_model(
    options: TuneOptions, model: str, time_budget: Duration | None, hooks: Hooks
) -> RunSummary:
    """Tune one model and (unless dry-run) write its best config back. `time_budget` bounds
    the whole of it (preparing the precisions and starting the server included)."""
    return tune_group(options, model_group(options, model), time_budget, hooks)


def model_evaluator(
    member: Member, server: TuningServer, budget: LatencyBudget, settings: EvaluationSettings
) -> GroupEvaluator:
    """The trial evaluator `tune_model` searches `member` with, on `server` (which serves
    it): for benchmarks that drive trials themselves."""
    return GroupEvaluator([member], server, settings, measure_served_model(budget), alone=True)
