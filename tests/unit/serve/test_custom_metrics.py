"""The custom metrics registry: each operation, Triton's misuse rules, reference counting per
owner, thread safety, and the families as /metrics writes them."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from serve.custom_metrics import CustomMetrics, FamilyView
from serve.metrics.custom import CustomMetricsCollector
from serve.metrics.exposition import render

LABELS = (("model", "m"), ("stage", "pre"))


def _registry(kind: str, buckets: list[float] | None = None) -> CustomMetrics:
    metrics = CustomMetrics()
    metrics.apply("family", ("requests", "Requests seen", kind))
    metrics.apply("metric", ("requests", LABELS, buckets))
    return metrics


def _text(metrics: CustomMetrics) -> str:
    return render(CustomMetricsCollector(metrics).collect()).decode()


def _only(metrics: CustomMetrics) -> FamilyView:
    (family,) = metrics.snapshot()
    return family


def test_counter_increments_and_reads_back() -> None:
    metrics = _registry("counter")
    assert metrics.apply("value", ("requests", LABELS)) == 0.0
    metrics.apply("increment", ("requests", LABELS, 2))
    metrics.apply("increment", ("requests", LABELS, 0.5))
    assert metrics.apply("value", ("requests", LABELS)) == 2.5


def test_gauge_goes_both_ways_and_is_set() -> None:
    metrics = _registry("gauge")
    metrics.apply("increment", ("requests", LABELS, 5))
    metrics.apply("increment", ("requests", LABELS, -7.5))
    assert metrics.apply("value", ("requests", LABELS)) == -2.5
    metrics.apply("set", ("requests", LABELS, 42))
    assert metrics.apply("value", ("requests", LABELS)) == 42.0


def test_histogram_counts_each_observation_in_its_bucket() -> None:
    metrics = _registry("histogram", [0.1, 1.0, 2.5])
    for value in (0.05, 0.1, 1.5, 6.0):
        metrics.apply("observe", ("requests", LABELS, value))
    (series,) = _only(metrics).series
    assert series.buckets == (0.1, 1.0, 2.5)
    assert series.counts == (2, 0, 1, 1)  # a value equal to a bound counts in that bucket
    assert series.count == 4
    assert series.value == pytest.approx(7.65)


@pytest.mark.parametrize(
    ("kind", "op", "value", "message"),
    [
        ("counter", "increment", -1, "a counter can only be incremented monotonically"),
        ("counter", "set", 1, "a counter does not support set"),
        ("counter", "observe", 1, "a counter does not support observe"),
        ("gauge", "observe", 1, "a gauge does not support observe"),
        ("histogram", "increment", 1, "a histogram does not support increment"),
        ("histogram", "set", 1, "a histogram does not support set"),
        ("gauge", "set", "3", "set needs a number, got str"),
        ("gauge", "increment", float("nan"), "increment got NaN"),
    ],
)
def test_misuse_is_refused_naming_the_metric_and_changes_nothing(
    kind: str, op: str, value: object, message: str
) -> None:
    metrics = _registry(kind, [1.0] if kind == "histogram" else None)
    before = metrics.snapshot()
    with pytest.raises(ValueError, match=message) as caught:
        metrics.apply(op, ("requests", LABELS, value))
    assert "metric requests{model='m', stage='pre'}" in str(caught.value)
    assert metrics.snapshot() == before


def test_a_histogram_has_no_single_value() -> None:
    metrics = _registry("histogram", [1.0])
    with pytest.raises(ValueError, match="a histogram does not support value"):
        metrics.apply("value", ("requests", LABELS))


@pytest.mark.parametrize(
    ("buckets", "message"),
    [
        (None, "a histogram metric needs buckets"),
        ([2.5, 0.1, 1.0], "strictly increasing"),
        ([1, 1, 2], "strictly increasing"),
        ([1.0, float("inf")], "must be finite"),
        (["1"], "buckets must be a list of numbers"),
    ],
)
def test_histogram_buckets_are_checked(buckets: list[float] | None, message: str) -> None:
    metrics = CustomMetrics()
    metrics.apply("family", ("latency", "Latency", "histogram"))
    with pytest.raises(ValueError, match=message):
        metrics.apply("metric", ("latency", (), buckets))
    assert metrics.snapshot() == []


def test_empty_buckets_leave_only_the_inf_bucket() -> None:
    metrics = CustomMetrics()
    metrics.apply("family", ("latency", "Latency", "histogram"))
    metrics.apply("metric", ("latency", (), []))
    metrics.apply("observe", ("latency", (), 3))
    assert _text(metrics).splitlines()[2:] == [
        'latency_bucket{le="+Inf"} 1',
        "latency_sum 3",
        "latency_count 1",
    ]


def test_buckets_on_a_counter_and_le_on_a_histogram_are_refused() -> None:
    metrics = CustomMetrics()
    metrics.apply("family", ("c", "", "counter"))
    metrics.apply("family", ("h", "", "histogram"))
    with pytest.raises(ValueError, match="buckets are only for histograms, this is a counter"):
        metrics.apply("metric", ("c", (), [1.0]))
    with pytest.raises(ValueError, match="'le' is the histogram's bucket label"):
        metrics.apply("metric", ("h", (("le", "1"),), [1.0]))


def test_same_labels_again_with_other_buckets_is_refused() -> None:
    metrics = _registry("histogram", [1.0])
    with pytest.raises(ValueError, match=r"already exists with buckets \[1.0\]"):
        metrics.apply("metric", ("requests", LABELS, [2.0]))


@pytest.mark.parametrize(
    ("name", "description", "kind", "message"),
    [
        ("nv_mine", "", "counter", "the prefix 'nv_' is reserved"),
        ("1bad", "", "counter", "not a valid Prometheus metric name"),
        ("has-dash", "", "counter", "not a valid Prometheus metric name"),
        ("fine", "", "summary", "unknown kind 'summary'"),
        ("fine", 3, "counter", "description must be a string"),
    ],
)
def test_family_definitions_are_checked(
    name: str, description: object, kind: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        CustomMetrics().apply("family", (name, description, kind))


def test_colons_are_allowed_in_a_family_name() -> None:
    metrics = CustomMetrics()
    metrics.apply("family", ("vllm:prompt_tokens_total", "Tokens", "counter"))
    metrics.apply("metric", ("vllm:prompt_tokens_total", (), None))
    assert "vllm:prompt_tokens_total 0" in _text(metrics)


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        ((("bad-name", "x"),), "label name 'bad-name' is not a valid Prometheus label name"),
        ((("__reserved", "x"),), "label name '__reserved'"),
        ((("count", 3),), "label 'count' must have a string value, got int"),
        ((("a", "x"), ("a", "y")), "a label name is given twice"),
        ("model=m", "labels must be \\(name, value\\) pairs"),
    ],
)
def test_labels_are_checked(labels: object, message: str) -> None:
    metrics = CustomMetrics()
    metrics.apply("family", ("requests", "", "counter"))
    with pytest.raises(ValueError, match=message):
        metrics.apply("metric", ("requests", labels, None))


def test_same_name_with_another_kind_is_refused_with_another_description_reused() -> None:
    metrics = CustomMetrics()
    metrics.apply("family", ("requests", "first description", "counter"))
    with pytest.raises(ValueError, match=r"already registered as a counter.*again as a gauge"):
        metrics.apply("family", ("requests", "first description", "gauge"))
    metrics.apply("family", ("requests", "second description", "counter"))
    metrics.apply("metric", ("requests", (), None))
    assert _only(metrics).description == "first description"


def test_unknown_operations_and_shapes_are_refused() -> None:
    metrics = _registry("counter")
    with pytest.raises(ValueError, match="unknown custom metric operation 'reset'"):
        metrics.apply("reset", ("requests",))
    with pytest.raises(ValueError, match=r"'increment' takes \(name, labels, value\)"):
        metrics.apply("increment", ("requests", LABELS))
    with pytest.raises(ValueError, match="metric family 'nothing' is not registered"):
        metrics.apply("metric", ("nothing", (), None))
    with pytest.raises(ValueError, match=r"metric requests\{model='x'\} does not exist"):
        metrics.apply("increment", ("requests", (("model", "x"),), 1))


def test_a_metric_lives_while_any_object_refers_to_it() -> None:
    metrics = _registry("counter")
    metrics.apply("metric", ("requests", LABELS, None))  # a second object, the same metric
    metrics.apply("increment", ("requests", LABELS, 3))
    metrics.apply("drop_metric", ("requests", LABELS))
    assert metrics.apply("value", ("requests", LABELS)) == 3.0
    metrics.apply("drop_metric", ("requests", LABELS))
    assert metrics.snapshot() == []
    metrics.apply("drop_family", ("requests",))
    with pytest.raises(ValueError, match="not registered"):
        metrics.apply("metric", ("requests", LABELS, None))


def test_a_family_stays_while_a_metric_of_it_remains() -> None:
    metrics = _registry("counter")
    metrics.apply("drop_family", ("requests",))
    assert [f.name for f in metrics.snapshot()] == ["requests"]
    metrics.apply("drop_metric", ("requests", LABELS))
    assert metrics.snapshot() == []
    metrics.apply("family", ("requests", "", "gauge"))  # the name is free again


def test_release_drops_what_one_owner_holds_and_keeps_the_others() -> None:
    metrics = CustomMetrics()
    for owner in ("instance 0", "instance 1"):
        metrics.apply("family", ("requests", "Requests", "counter"), owner)
        metrics.apply("metric", ("requests", (("instance", owner),), None), owner)
    metrics.apply("metric", ("requests", (("instance", "shared"),), None), "instance 0")
    metrics.apply("metric", ("requests", (("instance", "shared"),), None), "instance 1")
    metrics.release("instance 1")
    labels = [dict(s.labels)["instance"] for s in _only(metrics).series]
    assert labels == ["instance 0", "shared"]
    metrics.release("instance 0")
    assert metrics.snapshot() == []


@pytest.fixture
def frequent_thread_switches() -> Iterator[None]:
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # races show within a few thousand updates
    yield
    sys.setswitchinterval(interval)


@pytest.mark.usefixtures("frequent_thread_switches")
def test_threads_creating_and_incrementing_the_same_metrics_lose_nothing() -> None:
    # Without the registry's lock, two threads creating one metric at once each make it and
    # one reference is lost: the metric then vanishes before its last drop.
    metrics = CustomMetrics()
    metrics.apply("family", ("requests", "Requests", "counter"))
    threads, names = 8, [(("n", str(i)),) for i in range(2000)]

    def work() -> None:
        for labels in names:
            metrics.apply("metric", ("requests", labels, None))
        for labels in names:
            metrics.apply("increment", ("requests", labels, 1))

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert {metrics.apply("value", ("requests", labels)) for labels in names} == {threads}
    for labels in names:
        for _ in range(threads):
            metrics.apply("drop_metric", ("requests", labels))
    assert metrics.snapshot() == []


def test_families_render_as_triton_writes_them() -> None:
    metrics = CustomMetrics()
    metrics.apply("family", ("requests", "Requests seen", "counter"))
    metrics.apply("metric", ("requests", LABELS, None))
    metrics.apply("increment", ("requests", LABELS, 3))
    metrics.apply("family", ("temperature", "Current temperature", "gauge"))
    metrics.apply("metric", ("temperature", (), None))
    metrics.apply("set", ("temperature", (), 21.5))
    metrics.apply("family", ("latency", "Latency in seconds", "histogram"))
    metrics.apply("metric", ("latency", (("model", "m"),), [0.1, 1, 2.5]))
    for value in (0.05, 1.5, 6.0):
        metrics.apply("observe", ("latency", (("model", "m"),), value))
    text = _text(metrics)
    assert text.splitlines() == [
        "# HELP requests Requests seen",
        "# TYPE requests counter",
        'requests{model="m",stage="pre"} 3',
        "# HELP temperature Current temperature",
        "# TYPE temperature gauge",
        "temperature 21.5",
        "# HELP latency Latency in seconds",
        "# TYPE latency histogram",
        'latency_bucket{model="m",le="0.1"} 1',
        'latency_bucket{model="m",le="1"} 1',
        'latency_bucket{model="m",le="2.5"} 2',
        'latency_bucket{model="m",le="+Inf"} 3',
        'latency_sum{model="m"} 7.55',
        'latency_count{model="m"} 3',
    ]
    parsed = {family.name: family for family in text_string_to_metric_families(text)}
    assert parsed["latency"].type == "histogram"


def test_le_is_written_after_labels_that_sort_after_it() -> None:
    metrics = CustomMetrics()
    metrics.apply("family", ("latency", "", "histogram"))
    metrics.apply("metric", ("latency", (("zone", "a"),), [1]))
    assert 'latency_bucket{zone="a",le="1"} 0' in _text(metrics)
