"""Per-model inference metrics, read from each loaded model version's statistics at scrape
time: the request path pays nothing for them, and they agree with the statistics extension."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

from prometheus_client.metrics_core import Metric

from serve.scheduler.statistics import FailureReason, ModelStatistics


class ModelSource(Protocol):
    """What the collector reads of a loaded model version."""

    @property
    def stats(self) -> ModelStatistics: ...

    @property
    def pending_requests(self) -> int: ...


# A family's samples for one model: (labels beyond model and version, value).
Samples = Callable[[ModelSource], Iterable[tuple[dict[str, str], float]]]


@dataclass(frozen=True, slots=True)
class _Family:
    name: str
    documentation: str
    kind: str  # "counter" | "gauge"
    samples: Samples


def _one(value: Callable[[ModelSource], float]) -> Samples:
    return lambda model: [({}, value(model))]


def _failures(model: ModelSource) -> list[tuple[dict[str, str], float]]:
    return [({"reason": r.value}, model.stats.failures[r]) for r in FailureReason]


def _us(ns: int) -> int:
    return ns // 1000


# Triton's inference metrics, in its order, with its names and help texts.
_FAMILIES = (
    _Family(
        "nv_inference_request_success",
        "Number of successful inference requests, all batch sizes",
        "counter",
        _one(lambda m: m.stats.success.count),
    ),
    _Family(
        "nv_inference_request_failure",
        "Number of failed inference requests, all batch sizes",
        "counter",
        _failures,
    ),
    _Family(
        "nv_inference_count",
        "Number of inferences performed (does not include cached requests)",
        "counter",
        _one(lambda m: m.stats.inference_count),
    ),
    _Family(
        "nv_inference_exec_count",
        "Number of model executions performed (does not include cached requests)",
        "counter",
        _one(lambda m: m.stats.execution_count),
    ),
    _Family(
        "nv_inference_request_duration_us",
        "Cumulative inference request duration in microseconds (includes cached requests)",
        "counter",
        _one(lambda m: _us(m.stats.success.ns)),
    ),
    _Family(
        "nv_inference_queue_duration_us",
        "Cumulative inference queuing duration in microseconds (includes cached requests)",
        "counter",
        _one(lambda m: _us(m.stats.queue.ns)),
    ),
    _Family(
        "nv_inference_compute_input_duration_us",
        "Cumulative compute input duration in microseconds (does not include cached requests)",
        "counter",
        _one(lambda m: _us(m.stats.compute_input.ns)),
    ),
    _Family(
        "nv_inference_compute_infer_duration_us",
        "Cumulative compute inference duration in microseconds (does not include cached requests)",
        "counter",
        _one(lambda m: _us(m.stats.compute_infer.ns)),
    ),
    _Family(
        "nv_inference_compute_output_duration_us",
        "Cumulative inference compute output duration in microseconds (does not include cached "
        "requests)",
        "counter",
        _one(lambda m: _us(m.stats.compute_output.ns)),
    ),
    _Family(
        "nv_cache_num_hits_per_model",
        "Number of cache hits per model",
        "counter",
        _one(lambda m: m.stats.cache_hit.count),
    ),
    _Family(
        "nv_cache_hit_duration_per_model",
        "Total cache hit duration per model, in microseconds",
        "counter",
        _one(lambda m: _us(m.stats.cache_hit.ns)),
    ),
    _Family(
        "nv_cache_num_misses_per_model",
        "Number of cache misses per model",
        "counter",
        _one(lambda m: m.stats.cache_miss.count),
    ),
    _Family(
        "nv_cache_miss_duration_per_model",
        "Total cache miss (insert+lookup) duration per model, in microseconds",
        "counter",
        _one(lambda m: _us(m.stats.cache_miss.ns)),
    ),
    _Family(
        "nv_inference_pending_request_count",
        "Instantaneous number of pending requests awaiting execution per-model.",
        "gauge",
        _one(lambda m: m.pending_requests),
    ),
)


class InferenceCollector:
    """A prometheus_client collector over the loaded model versions `models()` returns.

    Call `collect` on the thread that updates the statistics (the event loop's), so a scrape
    reads each model's counters as one consistent set."""

    def __init__(self, models: Callable[[], Iterable[ModelSource]]) -> None:
        self._models = models

    def collect(self) -> Iterator[Metric]:
        models = list(self._models())
        for family in _FAMILIES:
            metric = Metric(family.name, family.documentation, family.kind)
            for model in models:
                base = {"model": model.stats.name, "version": model.stats.version}
                for extra, value in family.samples(model):
                    metric.add_sample(family.name, base | extra, value)
            yield metric
