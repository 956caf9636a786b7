"""Evaluating one candidate: load it into the tuning server, then find the highest load whose
latency percentile stays within the budget, and measure throughput there.

A trial is cheap where it can be (`EvaluationSettings.first_pass`): the load search runs a
first pass with short windows, started where the study's best trial so far saturated, reports
its ceiling per step to the study's pruner (`tuner.pruning`), and measures with full windows
only the operating point of a candidate that could still win."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from tritonclient.grpc import model_config_pb2 as mc

from analyzer.api import (
    SCOUT,
    AnalyzerError,
    LoadOptions,
    Measurement,
    MeasureSettings,
    SearchResult,
    SearchStep,
    find_max_load,
    operating_point,
)
from common.gpu import process_gpu_memory_bytes
from tuner.budget import LatencyBudget
from tuner.candidate import PRECISION, Candidate, config_precision
from tuner.defaults import DEFAULT_MEASUREMENT_INTERVAL_MS
from tuner.precision import PrecisionVariant
from tuner.precision.validation import RANDOM_VARIABLE_DIM
from tuner.search_types import GPU_MEMORY_METRIC, TrialContext, TrialOutcome
from tuner.server_control import ServerError, TuningServer

# Short windows: a trial measures several load levels, and the tuner must finish in minutes.
TRIAL_MEASUREMENT = MeasureSettings(
    measurement_interval_ms=DEFAULT_MEASUREMENT_INTERVAL_MS,
    stability_percentage=25.0,
    max_trials=10,
    warmup_request_count=20,
)


@dataclass(frozen=True, slots=True)
class EvaluationSettings:
    """How each trial is measured: the windows, the load search's reach, the data the load
    sends and over which protocol, and whether a first pass may cut a trial short."""

    measure: MeasureSettings = TRIAL_MEASUREMENT
    max_concurrency: int = 128
    binary_steps: int = 2
    # A level that does not settle in its windows gets one more try with windows twice as
    # long: on a busy machine short windows at a low load often wobble past the threshold.
    unstable_retries: int = 1
    input_data: str = "random"
    protocol: str = "http"  # what the load speaks: http | grpc
    shapes: dict[str, list[int]] = field(default_factory=dict)  # variable dims' sizes
    # A first pass with short windows, full windows only at the operating point, the study's
    # pruner told each step; False: every level with full windows, from concurrency 1.
    first_pass: bool = True
    # False: the first pass never reports to the pruner, so every candidate is measured to
    # its operating point (an exhaustive grid that later searches are compared against).
    prune: bool = True

    def for_model(self, config: mc.ModelConfig) -> EvaluationSettings:
        """What the load sends to the model of `config`: each variable dim (other than the
        batch) given the size the accuracy check's random inputs use, as perf_analyzer's
        --shape would (an ensemble taking images of any size, say)."""
        shapes = {
            tensor.name: [RANDOM_VARIABLE_DIM if d < 0 else int(d) for d in tensor.dims]
            for tensor in config.input
            if any(d < 0 for d in tensor.dims)
        }
        return replace(self, shapes=shapes | self.shapes)


def precision_refusal(
    candidate: Candidate, base: mc.ModelConfig, variants: dict[str, PrecisionVariant]
) -> TrialOutcome | None:
    """The outcome of a candidate whose precision cannot be served (not built, or beyond the
    accuracy limit: never served, the accuracy constraint alone makes it infeasible); None
    when it can."""
    precision = str(candidate.get(PRECISION, config_precision(base)))
    variant = variants.get(precision)
    if variant is None or variant.error is not None:
        reason = variant.error if variant is not None else "not prepared"
        return TrialOutcome.failed(f"precision {precision} unavailable: {reason}")
    if variant.accuracy is not None and not variant.accuracy.passed:
        return TrialOutcome("pruned", accuracy_ok=False, message=variant.verdict)
    return None


class TrialMeasurement(NamedTuple):
    """What measuring one trial gives: its outcome, the measurement the outcome is judged by,
    and the load search's levels, timed (empty where none was measured)."""

    outcome: TrialOutcome
    measurement: Measurement | None
    steps: list[SearchStep]


def measure_loaded(
    server: TuningServer,
    budget: LatencyBudget,
    settings: EvaluationSettings,
    context: TrialContext | None = None,
) -> TrialMeasurement:
    """Search the highest load within the budget for what `server` has loaded now, sending
    the load to `server.model_name` (a model tuned alone; for a pipeline, the ensemble: the
    budget is end to end). With `settings.first_pass` the search is staged, starts at the
    concurrency where `context.incumbent` was operated and reports to `context.report`."""
    try:
        url = server.url_for(settings.protocol)
    except ServerError as exc:
        return TrialMeasurement(TrialOutcome.failed(f"measurement failed: {exc}"), None, [])
    options = LoadOptions(
        url=url,
        protocol=settings.protocol,
        model=server.model_name,
        input_data=[settings.input_data],
        shapes=dict(settings.shapes),
        worker_processes=1,
    )
    try:
        result = find_max_load(
            options,
            settings.measure,
            budget.limit_us,
            percentile=budget.percentile,
            max_level=settings.max_concurrency,
            max_binary_steps=settings.binary_steps,
            unstable_retries=settings.unstable_retries,
            start=start_level(context, settings) if settings.first_pass else 1,
            first_pass=settings.measure.for_first_pass() if settings.first_pass else None,
            report=pruning_reporter(context, settings),
        )
    except AnalyzerError as exc:
        return TrialMeasurement(TrialOutcome.failed(f"measurement failed: {exc}"), None, [])
    outcome, measurement = trial_outcome(result, budget)
    return TrialMeasurement(with_gpu_memory(outcome, server), measurement, result.steps)


def with_gpu_memory(outcome: TrialOutcome, server: TuningServer) -> TrialOutcome:
    """`outcome` with the GPU memory the server's processes hold now, after its load search
    (the sessions, engines and buffers the config made), where there is a GPU to ask."""
    used = process_gpu_memory_bytes(server.process_ids())
    if used is None:
        return outcome
    return replace(outcome, metrics={**outcome.metrics, GPU_MEMORY_METRIC: float(used)})


def pruning_reporter(
    context: TrialContext | None, settings: EvaluationSettings
) -> Callable[[int, float], bool] | None:
    """Where the first pass reports each step's throughput: the study's pruner, unless the
    settings measure every candidate to its operating point (no first pass, or no pruning)."""
    if context is None or not settings.first_pass or not settings.prune:
        return None
    return context.report


def start_level(context: TrialContext | None, settings: EvaluationSettings) -> int:
    """Where the load search starts: the concurrency at which the study's best trial so far
    was operated (a candidate that can win saturates near it), else 1."""
    incumbent = context.incumbent if context is not None else None
    concurrency = incumbent.metrics.get("concurrency") if incumbent is not None else None
    if concurrency is None or not math.isfinite(concurrency) or concurrency < 1:
        return 1
    return min(int(concurrency), settings.max_concurrency)


def describe_steps(steps: list[SearchStep]) -> str:
    """The load search's levels in one line: level (fidelity) seconds, pass or fail."""
    if not steps:
        return "no load measured"
    parts = [
        f"{s.level:g}{'~' if s.fidelity == SCOUT else ''} {s.seconds:.2f}s{'' if s.passed else '!'}"
        for s in steps
    ]
    total = sum(s.seconds for s in steps)
    return f"levels {total:.2f} s: " + ", ".join(parts) + " (~ first pass, ! did not pass)"


def trial_outcome(
    result: SearchResult, budget: LatencyBudget
) -> tuple[TrialOutcome, Measurement | None]:
    """What a load search says of a candidate, and the measurement it is judged by."""
    if result.stopped_early:
        return _stopped_early(result, budget)
    if result.best is not None:
        best = _operating_point(result.measurements, budget, result.best)
        outcome = TrialOutcome(
            "ok",
            throughput=best.throughput,
            latency_us=best.percentile_us(budget.percentile),
            metrics=_metrics(best),
        )
        return outcome, best
    # A lowest level that never settled but was over budget all the same is over budget: a
    # steadier measurement would not bring a slow config within it (a long queue delay at
    # concurrency 1 gives few requests per window, so its latency rarely settles).
    first = next(
        (
            m
            for m in result.measurements
            if m.stable or m.percentile_us(budget.percentile) > budget.limit_us
        ),
        None,
    )
    if first is None:
        return TrialOutcome.failed(f"no stable measurement: {result.reason}"), None
    outcome = TrialOutcome(
        "pruned",
        throughput=first.throughput,
        latency_us=first.percentile_us(budget.percentile),
        metrics=_metrics(first),
        message=f"over budget at concurrency 1: {result.reason}",
    )
    return outcome, first


def _stopped_early(
    result: SearchResult, budget: LatencyBudget
) -> tuple[TrialOutcome, Measurement | None]:
    """The study's pruner stopped the search after its first pass: the outcome is that
    pass's best level within the budget (short windows: never feasible, only pruned)."""
    within = [m for m in result.scouted if m.percentile_us(budget.percentile) <= budget.limit_us]
    ceiling = max(within, key=lambda m: m.throughput, default=None)
    if ceiling is None:
        return TrialOutcome("pruned", message=f"pruned: {result.reason}"), None
    outcome = TrialOutcome(
        "pruned",
        throughput=ceiling.throughput,
        latency_us=ceiling.percentile_us(budget.percentile),
        metrics=_metrics(ceiling),
        message=f"pruned: its throughput stopped growing clearly below the best so far "
        f"({result.reason})",
    )
    return outcome, ceiling


def _operating_point(
    measurements: list[Measurement], budget: LatencyBudget, best: Measurement
) -> Measurement:
    point = operating_point(measurements, budget.limit_us, budget.percentile)
    return best if point is None else point


def _metrics(m: Measurement) -> dict[str, float]:
    values = {
        "concurrency": float(m.concurrency),
        "p50_us": m.latency_p50_us,
        "p90_us": m.latency_p90_us,
        "p95_us": m.latency_p95_us,
        "p99_us": m.latency_p99_us,
        "avg_us": m.latency_avg_us,
        "server_queue_us": m.server.queue_us,
        "server_compute_input_us": m.server.compute_input_us,
        "server_compute_infer_us": m.server.compute_infer_us,
        "server_compute_output_us": m.server.compute_output_us,
        "server_overhead_us": m.server.overhead_us,
        "errors": float(m.error_count),
    }
    values |= step_metrics(m)
    return {k: v for k, v in values.items() if math.isfinite(v)}


STEP_PREFIX = "step."


def step_metrics(m: Measurement) -> dict[str, float]:
    """Each composing model's server-side queue and compute time per request (an ensemble's
    measurement), as "step.<model>.queue_us" and "step.<model>.compute_us"."""
    values: dict[str, float] = {}
    for model, breakdown in m.composing.items():
        if not breakdown.available:
            continue
        compute = (
            breakdown.compute_input_us + breakdown.compute_infer_us + breakdown.compute_output_us
        )
        values[f"{STEP_PREFIX}{model}.queue_us"] = breakdown.queue_us
        values[f"{STEP_PREFIX}{model}.compute_us"] = compute
    return values
