"""How a load search's result becomes a trial's outcome."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from analyzer.api import Measurement, SearchResult
from analyzer.measurement import ServerBreakdown
from tuner.budget import LatencyBudget
from tuner.candidate import Candidate
from tuner.duration import Duration
from tuner.evaluate import (
    EvaluationSettings,
    TrialMeasurement,
    pruning_reporter,
    start_level,
    trial_outcome,
)
from tuner.group_evaluate import GroupEvaluator
from tuner.precision.variants import PrecisionVariant
from tuner.search_types import TrialContext, TrialOutcome
from tuner.server_control import ServerError

BUDGET = LatencyBudget(95, Duration.from_ms(20))


def _measurement(concurrency: int, p95_ms: float, stable: bool, throughput: float) -> Measurement:
    p95_us = p95_ms * 1000
    return Measurement(
        model="m",
        concurrency=concurrency,
        request_rate=0.0,
        batch_size=1,
        throughput=throughput,
        request_throughput=throughput,
        request_count=10,
        error_count=0,
        errors={},
        latency_avg_us=p95_us,
        latency_p50_us=p95_us,
        latency_p90_us=p95_us,
        latency_p95_us=p95_us,
        latency_p99_us=p95_us,
        stable=stable,
    )


def test_an_unsettled_lowest_level_far_over_budget_is_over_budget_not_a_failure() -> None:
    # A config with a 40 ms queue delay at concurrency 1: few requests a window, never stable.
    slow = _measurement(1, p95_ms=45.0, stable=False, throughput=24.0)
    result = SearchResult(best=None, max_level=None, measurements=[slow], reason="unstable")
    outcome, judged_by = trial_outcome(result, BUDGET)
    assert outcome.status == "pruned"
    assert outcome.latency_us == 45_000.0
    assert judged_by is slow


def test_an_unsettled_level_within_budget_is_still_no_measurement() -> None:
    noisy = _measurement(1, p95_ms=5.0, stable=False, throughput=900.0)
    result = SearchResult(best=None, max_level=None, measurements=[noisy], reason="unstable")
    outcome, judged_by = trial_outcome(result, BUDGET)
    assert outcome.status == "failed"
    assert "no stable measurement" in (outcome.message or "")
    assert judged_by is None


def test_a_passing_search_is_judged_at_its_operating_point() -> None:
    low = _measurement(1, p95_ms=2.0, stable=True, throughput=500.0)
    high = _measurement(4, p95_ms=8.0, stable=True, throughput=1_000.0)
    result = SearchResult(best=high, max_level=4, measurements=[low, high], reason="done")
    outcome, judged_by = trial_outcome(result, BUDGET)
    assert outcome.status == "ok"
    assert outcome.throughput == 1_000.0
    assert judged_by is high


def test_an_ensembles_steps_breakdown_becomes_the_trials_step_metrics() -> None:
    encoder = ServerBreakdown(
        request_count=10,
        queue_us=200.0,
        compute_input_us=10.0,
        compute_infer_us=900.0,
        compute_output_us=20.0,
        available=True,
    )
    measured = replace(
        _measurement(4, 10.0, True, 100.0),
        composing={"encoder": encoder, "silent": ServerBreakdown()},
    )
    result = SearchResult(best=measured, max_level=4, measurements=[measured], reason="done")
    outcome, _ = trial_outcome(result, BUDGET)
    assert outcome.metrics["step.encoder.queue_us"] == 200.0
    assert outcome.metrics["step.encoder.compute_us"] == 930.0
    assert not any(name.startswith("step.silent.") for name in outcome.metrics)


def test_variable_input_dims_get_a_size_for_the_load() -> None:
    config = mc.ModelConfig(name="pipe", platform="ensemble", max_batch_size=8)
    config.input.add(name="IMAGE", data_type=mc.TYPE_UINT8, dims=[-1, -1])
    config.input.add(name="SCALE", data_type=mc.TYPE_FP32, dims=[1])
    settings = EvaluationSettings().for_model(config)
    assert settings.shapes == {"IMAGE": [8, 8]}


def test_a_search_stopped_after_its_first_pass_is_pruned_at_its_ceiling() -> None:
    low = _measurement(1, p95_ms=2.0, stable=True, throughput=500.0)
    top = _measurement(4, p95_ms=6.0, stable=False, throughput=900.0)
    over = _measurement(8, p95_ms=30.0, stable=True, throughput=950.0)
    result = SearchResult(
        best=None,
        max_level=None,
        scouted=[low, top, over],
        stopped_early=True,
        reason="stopped after the first pass",
    )
    outcome, judged_by = trial_outcome(result, BUDGET)
    assert outcome.status == "pruned"
    assert outcome.throughput == 900.0 and outcome.latency_us == 6_000.0
    assert outcome.metrics["concurrency"] == 4.0
    assert judged_by is top


def test_the_load_search_starts_where_the_best_trial_so_far_was_operated() -> None:
    settings = EvaluationSettings(max_concurrency=64)
    incumbent = TrialOutcome("ok", 5000.0, 4000.0, metrics={"concurrency": 8.0})
    assert start_level(TrialContext(3, incumbent), settings) == 8
    assert start_level(TrialContext(0, None), settings) == 1
    assert start_level(None, settings) == 1
    assert start_level(TrialContext(3, TrialOutcome("ok", 5000.0, 4000.0)), settings) == 1
    far = TrialOutcome("ok", 5000.0, 4000.0, metrics={"concurrency": 512.0})
    assert start_level(TrialContext(3, far), settings) == 64


def test_only_a_pruning_first_pass_reports_to_the_study() -> None:
    def report(_step: int, _throughput: float) -> bool:
        return True

    context = TrialContext(3, None, report)
    assert pruning_reporter(context, EvaluationSettings()) is report
    # the benchmark's grid: every candidate measured to its operating point
    assert pruning_reporter(context, EvaluationSettings(prune=False)) is None
    assert pruning_reporter(context, EvaluationSettings(first_pass=False)) is None
    assert pruning_reporter(None, EvaluationSettings()) is None


class _CrashingServer:
    """A tuning server that dies under the first trial: its load fails, and it has exited."""

    def __init__(self) -> None:
        self.exited = False
        self.restarts = 0
        self.loads = 0

    def load(self, config: mc.ModelConfig, model: str | None = None) -> None:
        self.loads += 1
        if self.loads == 1:
            self.exited = True
            raise ServerError("the tuning server did not answer a load: connection refused")

    def restart_if_exited(self) -> str | None:
        if not self.exited:
            return None
        self.exited = False
        self.restarts += 1
        return "the tuning server exited (killed by signal 9) and was restarted"


@dataclass(frozen=True)
class _Member:
    """What the evaluator reads of a group's member."""

    model: str
    base: mc.ModelConfig
    variants: tuple[PrecisionVariant, ...]


def _model_alone(server: _CrashingServer, measured: TrialOutcome) -> GroupEvaluator:
    """The evaluator of a model "m" tuned alone on `server`, each measurement `measured`."""
    member = _Member(
        "m",
        mc.ModelConfig(name="m", max_batch_size=8),
        (PrecisionVariant("fp32", Path("model.onnx"), None, 0.0),),
    )
    return GroupEvaluator(
        [member],  # type: ignore[list-item]
        server,  # type: ignore[arg-type]
        EvaluationSettings(),
        lambda _server, _members, _settings, _context: TrialMeasurement(measured, None, []),
        alone=True,
    )


def test_a_trial_whose_server_died_fails_saying_so_and_the_next_trial_runs() -> None:
    server = _CrashingServer()
    measured = TrialOutcome("ok", throughput=100.0, latency_us=1000.0)
    evaluator = _model_alone(server, measured)
    first = evaluator(Candidate({}))
    assert first.status == "failed"
    assert first.message.startswith("the tuning server exited (killed by signal 9)")
    assert "did not answer a load" in first.message
    assert server.restarts == 1
    assert evaluator(Candidate({})) is measured  # the search goes on, on the restarted server
    assert server.loads == 2


def test_a_restarted_server_is_loaded_again_with_the_config_it_had() -> None:
    """The restarted server serves the config as written: a trial of the candidate loaded
    before the crash must load it again, not take it as loaded."""
    server = _CrashingServer()
    server.loads = 1  # the first load succeeds
    measured = TrialOutcome("ok", throughput=100.0, latency_us=1000.0)
    evaluator = _model_alone(server, measured)
    assert evaluator(Candidate({"max_batch_size": 4})) is measured
    assert evaluator(Candidate({"max_batch_size": 4})) is measured
    assert server.loads == 2  # the same config is not loaded twice
    server.exited = True  # dies between trials
    assert evaluator(Candidate({"max_batch_size": 4})) is measured
    assert server.restarts == 1
    assert server.loads == 3
