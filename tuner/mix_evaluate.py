"""Measuring one candidate of a traffic mix, its models' configs loaded (by the group's
evaluator, `tuner.group_run`): the mix measured as it will be served: every model at its
share of a total request rate at once, searching the highest total rate at which every
model's latency percentile stays within the budget (`analyzer.api.find_max_mixed_load`).

The objective is the total throughput at that rate; the outcome's latency is the worst
model's percentile (every model has the same budget); each model's own throughput, latency
and rate go to the trial's metrics as "mix.<model>.throughput", "mix.<model>.p95_us"
(the budget's percentile) and "mix.<model>.request_rate"."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from analyzer.api import (
    AnalyzerError,
    LoadOptions,
    Measurement,
    MixedModelLoad,
    MixedSearchResult,
    find_max_mixed_load,
)
from tuner.budget import LatencyBudget
from tuner.evaluate import EvaluationSettings, TrialMeasurement, trial_outcome
from tuner.group_members import Member
from tuner.search_types import TrialContext, TrialOutcome
from tuner.server_control import ServerError, TuningServer

MIX_PREFIX = "mix."


def mix_metric(model: str, name: str) -> str:
    """The trial metric of one model under the mix: "mix.<model>.<name>"."""
    return f"{MIX_PREFIX}{model}.{name}"


class MixMeasure:
    """How a mix's trial is measured (a `tuner.group_evaluate.Measure`): the loaded models at their
    shares of a total rate, the highest total rate within the budget for every model."""

    def __init__(self, shares: Mapping[str, float], budget: LatencyBudget) -> None:
        self._shares = dict(shares)
        self._budget = budget

    def __call__(
        self,
        server: TuningServer,
        models: Sequence[Member],
        settings: EvaluationSettings,
        context: TrialContext | None = None,
    ) -> TrialMeasurement:
        """Search the highest total rate within the budget for the configs loaded now."""
        try:
            url = server.url_for(settings.protocol)
        except ServerError as exc:
            return TrialMeasurement(TrialOutcome.failed(f"measurement failed: {exc}"), None, [])
        loads = [
            MixedModelLoad(
                LoadOptions(
                    url=url,
                    protocol=settings.protocol,
                    model=setup.model,
                    input_data=[settings.input_data],
                    shapes=dict(settings.for_model(setup.base).shapes),
                    worker_processes=1,
                ),
                self._shares[setup.model],
            )
            for setup in models
        ]
        try:
            result = find_max_mixed_load(
                loads,
                settings.measure,
                self._budget.limit_us,
                percentile=self._budget.percentile,
                max_binary_steps=settings.binary_steps,
                unstable_retries=settings.unstable_retries,
            )
        except AnalyzerError as exc:
            return TrialMeasurement(TrialOutcome.failed(f"measurement failed: {exc}"), None, [])
        outcome, judged = trial_outcome(result.search, self._budget)
        return TrialMeasurement(
            self._with_models(outcome, judged, result), judged, result.search.steps
        )

    def _with_models(
        self, outcome: TrialOutcome, judged: Measurement | None, result: MixedSearchResult
    ) -> TrialOutcome:
        """The outcome with each model's figures at the total rate it was judged by."""
        if judged is None:
            return outcome
        metrics = dict(outcome.metrics)
        metrics["request_rate"] = judged.request_rate
        percentile = self._budget.percentile
        for model, m in result.models_at(judged.request_rate).items():
            metrics[mix_metric(model, "throughput")] = m.throughput
            metrics[mix_metric(model, f"p{percentile}_us")] = m.percentile_us(percentile)
            metrics[mix_metric(model, "request_rate")] = m.request_rate
        message = outcome.message
        if outcome.status == "pruned":
            message = f"over budget at the lowest total rate searched: {result.search.reason}"
        return replace(outcome, metrics=metrics, message=message)
