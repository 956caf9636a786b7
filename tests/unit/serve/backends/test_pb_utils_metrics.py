"""pb_utils.MetricFamily and Metric as a Triton model uses them, over services that forward to
a real CustomMetrics registry as the stub's transport does (misuse: TritonModelException)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

from serve.backends.python import pb_utils
from serve.custom_metrics import CustomMetrics, FamilyView


class ForwardingServices:
    """The stub's metric call, without the process boundary: the registry's ValueError comes
    back as TritonModelException with the server's message, as the transport returns it."""

    def __init__(self) -> None:
        self.registry = CustomMetrics()
        self.sent: list[str] = []

    def metric(self, op: str, args: tuple[Any, ...]) -> float | None:
        self.sent.append(op)
        try:
            return self.registry.apply(op, args, owner="instance 0")
        except ValueError as exc:
            raise pb_utils.TritonModelException(str(exc)) from None


@pytest.fixture
def services() -> Iterator[ForwardingServices]:
    forwarding = ForwardingServices()
    pb_utils._install_services(forwarding)  # type: ignore[arg-type]
    yield forwarding
    gc.collect()  # this test's objects' drops go to this test's registry
    pb_utils._flush_dropped_metrics()
    pb_utils._install_services(None)


def _families(services: ForwardingServices) -> dict[str, FamilyView]:
    return {family.name: family for family in services.registry.snapshot()}


def test_counter_gauge_and_histogram_as_a_model_uses_them(services: ForwardingServices) -> None:
    requests = pb_utils.MetricFamily(
        name="requests", description="Requests seen", kind=pb_utils.MetricFamily.COUNTER
    )
    counter = requests.Metric(labels={"model": "m"})
    counter.increment(2)
    counter.increment(0.5)
    assert counter.value() == 2.5

    queue = pb_utils.MetricFamily("queue", "Queue depth", pb_utils.MetricFamily.GAUGE)
    gauge = queue.Metric()
    gauge.set(7)
    gauge.increment(-2)
    assert gauge.value() == 5.0

    latency = pb_utils.MetricFamily("latency", "Latency", pb_utils.MetricFamily.HISTOGRAM)
    histogram = latency.Metric(labels={"model": "m"}, buckets=[0.1, 1.0])
    for value in (0.05, 0.5, 5):
        histogram.observe(value)

    families = _families(services)
    assert families["requests"].series[0].labels == (("model", "m"),)
    assert families["queue"].series[0].value == 5.0
    (series,) = families["latency"].series
    assert (series.counts, series.count, series.value) == ((1, 1, 1), 3, 5.55)


@pytest.mark.parametrize(
    ("kind", "call", "message"),
    [
        ("counter", lambda m: m.increment(-1), "Failed to increment metric value: metric c"),
        ("counter", lambda m: m.set(1), "Failed to set metric value: .* a counter does not"),
        ("counter", lambda m: m.observe(1), "a counter does not support observe"),
        ("gauge", lambda m: m.observe(1), "a gauge does not support observe"),
        ("histogram", lambda m: m.increment(1), "a histogram does not support increment"),
        ("histogram", lambda m: m.set(1), "a histogram does not support set"),
        ("histogram", lambda m: m.value(), "Failed to get metric value: .* does not support value"),
    ],
)
def test_misuse_raises_before_anything_is_sent(
    services: ForwardingServices, kind: str, call: Any, message: str
) -> None:
    family = pb_utils.MetricFamily("c", "", kind)
    metric = family.Metric(buckets=[1.0] if kind == "histogram" else None)
    sent = list(services.sent)
    with pytest.raises(pb_utils.TritonModelException, match=message):
        call(metric)
    assert services.sent == sent  # updates are not answered: pb_utils checks them itself


def test_histogram_metric_needs_sorted_buckets(services: ForwardingServices) -> None:
    family = pb_utils.MetricFamily("latency", "", pb_utils.MetricFamily.HISTOGRAM)
    with pytest.raises(pb_utils.TritonModelException, match="needs buckets"):
        family.Metric(labels={})
    with pytest.raises(pb_utils.TritonModelException, match="strictly increasing"):
        family.Metric(labels={}, buckets=[2.5, 0.1, 1.0])
    with pytest.raises(pb_utils.TritonModelException, match="strictly increasing"):
        family.Metric(labels={}, buckets=[1, 1, 2])
    family.Metric(labels={}, buckets=[])


def test_labels_must_be_a_dict_of_strings(services: ForwardingServices) -> None:
    family = pb_utils.MetricFamily("requests", "", pb_utils.MetricFamily.COUNTER)
    with pytest.raises(pb_utils.TritonModelException, match="Labels must be a dictionary"):
        family.Metric(labels=[("model", "m")])  # type: ignore[arg-type]
    with pytest.raises(pb_utils.TritonModelException, match="label 'n' must have a string value"):
        family.Metric(labels={"n": 1})  # type: ignore[dict-item]


def test_family_errors_come_from_the_server_with_triton_s_prefix(
    services: ForwardingServices,
) -> None:
    first = pb_utils.MetricFamily("requests", "first", pb_utils.MetricFamily.COUNTER)
    with pytest.raises(
        pb_utils.TritonModelException,
        match="Error when creating MetricFamily: metric family 'requests' is already registered",
    ):
        pb_utils.MetricFamily("requests", "first", pb_utils.MetricFamily.GAUGE)
    second = pb_utils.MetricFamily("requests", "second", pb_utils.MetricFamily.COUNTER)
    second.Metric().increment(1)
    first.Metric().increment(1)  # the same family name and labels: one metric
    (family,) = services.registry.snapshot()
    assert (family.description, family.series[0].value) == ("first", 2.0)
    with pytest.raises(pb_utils.TritonModelException, match="prefix 'nv_' is reserved"):
        pb_utils.MetricFamily("nv_mine", "", pb_utils.MetricFamily.GAUGE)


def test_a_family_keeps_its_metrics_as_triton_s_does(services: ForwardingServices) -> None:
    family = pb_utils.MetricFamily("requests", "", pb_utils.MetricFamily.COUNTER)
    for _ in range(3):
        family.Metric(labels={"model": "m"}).increment(1)  # a new object each time: one metric
        gc.collect()
    assert family.Metric(labels={"model": "m"}).value() == 3.0


def test_deleted_objects_are_dropped_at_the_next_call(services: ForwardingServices) -> None:
    family = pb_utils.MetricFamily("requests", "", pb_utils.MetricFamily.COUNTER)
    kept = family.Metric(labels={"which": "kept"})
    family.Metric(labels={"which": "kept"}).increment(1)  # a second object, then deleted
    gc.collect()
    kept.increment(1)  # sends the pending drop first; the family's object keeps the metric
    del family  # the metric keeps its family
    gc.collect()
    kept.increment(1)
    assert kept.value() == 3.0
    assert len(_families(services)["requests"].series) == 1
    del kept
    gc.collect()
    pb_utils._flush_dropped_metrics()
    assert services.registry.snapshot() == []
    pb_utils.MetricFamily("requests", "", pb_utils.MetricFamily.GAUGE)  # the name is free


def test_outside_a_stub_metrics_need_the_server() -> None:
    with pytest.raises(pb_utils.TritonModelException, match="needs the server"):
        pb_utils.MetricFamily("requests", "", pb_utils.MetricFamily.COUNTER)
