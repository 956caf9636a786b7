"""Evaluating one candidate of a traffic mix: each model's part loaded into the one tuning
server that serves them all (only the models whose config changed since the last trial),
then the mix measured as it will be served: every model at its share of a total request rate
at once, searching the highest total rate at which every model's latency percentile stays
within the budget (`analyzer.api.find_max_mixed_load`).

The objective is the total throughput at that rate; the outcome's latency is the worst
model's percentile (every model has the same budget); each model's own throughput, latency
and rate go to the trial's metrics as "mix.<model>.throughput", "mix.<model>.p95_us"
(the budget's percentile) and "mix.<model>.request_rate"."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from tritonclient.grpc import model_config_pb2 as mc

from analyzer.api import (
    AnalyzerError,
    LoadOptions,
    Measurement,
    MixedModelLoad,
    MixedSearchResult,
    find_max_mixed_load,
)
from tuner.budget import LatencyBudget
from tuner.candidate import Candidate, apply, step_candidate
from tuner.evaluate import EvaluationSettings, trial_outcome
from tuner.pipeline_run import StepSetup, steps_refusal
from tuner.search_types import TrialContext, TrialOutcome
from tuner.server_control import ServerError, TuningServer

MIX_PREFIX = "mix."


def mix_metric(model: str, name: str) -> str:
    """The trial metric of one model under the mix: "mix.<model>.<name>"."""
    return f"{MIX_PREFIX}{model}.{name}"


class MixEvaluator:
    """Callable the search loop uses: a mix Candidate -> TrialOutcome."""

    def __init__(
        self,
        models: Sequence[StepSetup],
        shares: Mapping[str, float],
        server: TuningServer,
        budget: LatencyBudget,
        settings: EvaluationSettings,
    ) -> None:
        self._models = tuple(models)
        self._shares = dict(shares)
        self._server = server
        self._budget = budget
        self._settings = settings
        self._loaded: dict[str, mc.ModelConfig] = {}
        self.last_measurement: Measurement | None = None

    def configs_for(self, candidate: Candidate) -> dict[str, mc.ModelConfig]:
        """Each model's config under `candidate` (as written where it has no part)."""
        return {m.model: apply(step_candidate(candidate, m.model), m.base) for m in self._models}

    def load(self, candidate: Candidate) -> None:
        """Load each model whose config under `candidate` differs from the one loaded;
        ServerError naming the model refused."""
        for model, config in self.configs_for(candidate).items():
            if self._loaded.get(model) == config:
                continue
            self._loaded.pop(model, None)
            try:
                self._server.load(config, model)
            except ServerError as exc:
                raise ServerError(f"the server refused {model}'s config: {exc}") from None
            self._loaded[model] = config

    def __call__(self, candidate: Candidate, context: TrialContext | None = None) -> TrialOutcome:
        refused = steps_refusal(candidate, self._models)
        if refused is not None:
            return refused
        try:
            self.load(candidate)
        except ServerError as exc:
            return TrialOutcome.failed(str(exc))
        return self.measure()

    def measure(self) -> TrialOutcome:
        """Search the highest total rate within the budget for the configs loaded now."""
        try:
            url = self._server.url_for(self._settings.protocol)
        except ServerError as exc:
            return TrialOutcome.failed(f"measurement failed: {exc}")
        loads = [
            MixedModelLoad(
                LoadOptions(
                    url=url,
                    protocol=self._settings.protocol,
                    model=setup.model,
                    input_data=[self._settings.input_data],
                    shapes=dict(self._settings.for_model(setup.base).shapes),
                    worker_processes=1,
                ),
                self._shares[setup.model],
            )
            for setup in self._models
        ]
        try:
            result = find_max_mixed_load(
                loads,
                self._settings.measure,
                self._budget.limit_us,
                percentile=self._budget.percentile,
                max_binary_steps=self._settings.binary_steps,
                unstable_retries=self._settings.unstable_retries,
            )
        except AnalyzerError as exc:
            return TrialOutcome.failed(f"measurement failed: {exc}")
        outcome, self.last_measurement = trial_outcome(result.search, self._budget)
        return self._with_models(outcome, result)

    def _with_models(self, outcome: TrialOutcome, result: MixedSearchResult) -> TrialOutcome:
        """The outcome with each model's figures at the total rate it was judged by."""
        judged = self.last_measurement
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
