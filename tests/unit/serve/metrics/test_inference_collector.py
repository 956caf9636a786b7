"""The inference metrics are the models' statistics, read at scrape time, in Triton's names,
help texts and labels."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from serve.backends.base import BatchTimes
from serve.metrics.exposition import render
from serve.metrics.inference import InferenceCollector
from serve.scheduler.statistics import FailureReason, ModelStatistics


@dataclass
class FakeModel:
    stats: ModelStatistics
    pending_requests: int = 0


@dataclass
class FakeRepository:
    models: list[FakeModel] = field(default_factory=list)

    def loaded(self) -> list[FakeModel]:
        return self.models


def scrape(repository: FakeRepository) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """family -> {sorted labels: value}, parsed back from the text a scrape serves."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(InferenceCollector(repository.loaded))
    text = render(registry.collect()).decode()
    return {
        family.name: {tuple(sorted(s.labels.items())): s.value for s in family.samples}
        for family in text_string_to_metric_families(text)
    }


def labels(model: str, version: str, **extra: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({"model": model, "version": version, **extra}.items()))


def busy_model() -> FakeModel:
    stats = ModelStatistics("simple", "1")
    stats.record_execution(3, input_ns=1_000, infer_ns=20_000, output_ns=3_000)
    stats.record_successes(2, 91_999, 7_500, BatchTimes(1_000, 20_000, 3_000))
    stats.record_execution(1, input_ns=1_000, infer_ns=20_000, output_ns=3_000)
    stats.record_successes(1, 40_000, 2_000, BatchTimes(1_000, 20_000, 3_000))
    stats.record_failure(5_000, FailureReason.REJECTED)
    stats.record_failure(0, FailureReason.REJECTED)
    stats.record_failure(8_000, FailureReason.BACKEND)
    return FakeModel(stats, pending_requests=4)


def test_counters_equal_the_statistics() -> None:
    model = busy_model()
    metrics = scrape(FakeRepository([model]))
    simple = labels("simple", "1")
    assert metrics["nv_inference_request_success"] == {simple: 3}
    assert metrics["nv_inference_count"] == {simple: 4}
    assert metrics["nv_inference_exec_count"] == {simple: 2}
    # microseconds: the statistics' nanoseconds / 1000, rounded down as Triton's are
    assert metrics["nv_inference_request_duration_us"] == {simple: 131}
    assert metrics["nv_inference_queue_duration_us"] == {simple: 9}
    assert metrics["nv_inference_compute_input_duration_us"] == {simple: 3}
    assert metrics["nv_inference_compute_infer_duration_us"] == {simple: 60}
    assert metrics["nv_inference_compute_output_duration_us"] == {simple: 9}
    assert metrics["nv_inference_pending_request_count"] == {simple: 4}


def test_failures_are_counted_by_reason_every_reason_listed() -> None:
    metrics = scrape(FakeRepository([busy_model()]))
    assert metrics["nv_inference_request_failure"] == {
        labels("simple", "1", reason="REJECTED"): 2,
        labels("simple", "1", reason="BACKEND"): 1,
        labels("simple", "1", reason="CANCELED"): 0,
        labels("simple", "1", reason="OTHER"): 0,
    }


def test_every_loaded_version_has_its_own_series() -> None:
    repository = FakeRepository([busy_model(), FakeModel(ModelStatistics("simple", "2"))])
    repository.models.append(FakeModel(ModelStatistics("digits", "1"), pending_requests=1))
    metrics = scrape(repository)
    assert metrics["nv_inference_request_success"] == {
        labels("simple", "1"): 3,
        labels("simple", "2"): 0,
        labels("digits", "1"): 0,
    }
    assert metrics["nv_inference_pending_request_count"][labels("digits", "1")] == 1


def test_values_are_read_at_each_scrape() -> None:
    repository = FakeRepository()
    assert scrape(repository)["nv_inference_request_success"] == {}
    model = FakeModel(ModelStatistics("simple", "1"))
    repository.models.append(model)
    assert scrape(repository)["nv_inference_request_success"] == {labels("simple", "1"): 0}
    model.stats.record_successes(5, 10_000, 0, BatchTimes())
    model.pending_requests = 2
    metrics = scrape(repository)
    assert metrics["nv_inference_request_success"] == {labels("simple", "1"): 5}
    assert metrics["nv_inference_pending_request_count"] == {labels("simple", "1"): 2}


def test_names_help_and_types_are_tritons() -> None:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(InferenceCollector(FakeRepository([busy_model()]).loaded))
    text = render(registry.collect()).decode()
    assert "# HELP nv_inference_request_success Number of successful inference requests, all " \
        "batch sizes\n# TYPE nv_inference_request_success counter\n" in text  # fmt: skip
    assert 'nv_inference_request_success{model="simple",version="1"} 3\n' in text
    assert 'nv_inference_request_failure{model="simple",reason="REJECTED",version="1"} 2\n' in text
    assert "# TYPE nv_inference_pending_request_count gauge\n" in text
    assert "_total" not in text, "Triton's counters carry no _total suffix"
    assert [f.name for f in text_string_to_metric_families(text)] == [
        "nv_inference_request_success",
        "nv_inference_request_failure",
        "nv_inference_count",
        "nv_inference_exec_count",
        "nv_inference_request_duration_us",
        "nv_inference_queue_duration_us",
        "nv_inference_compute_input_duration_us",
        "nv_inference_compute_infer_duration_us",
        "nv_inference_compute_output_duration_us",
        "nv_cache_num_hits_per_model",  # Triton 2.51 shows these with or without a cache
        "nv_cache_hit_duration_per_model",
        "nv_cache_num_misses_per_model",
        "nv_cache_miss_duration_per_model",
        "nv_inference_pending_request_count",
    ]
