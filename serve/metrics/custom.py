"""The custom metrics python models define (serve.custom_metrics), as Prometheus families:
counters and gauges one sample per metric, histograms `_bucket` (cumulative, `le` as Triton
writes it: 1 not 1.0, and +Inf), `_sum` and `_count`."""

from __future__ import annotations

import math
from collections.abc import Iterator

from prometheus_client.metrics_core import Metric
from prometheus_client.utils import floatToGoString

from serve.custom_metrics import CustomMetrics, FamilyView


class CustomMetricsCollector:
    """A prometheus_client collector that reads the models' families afresh at every scrape."""

    def __init__(self, metrics: CustomMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        yield from (_family(view) for view in self._metrics.snapshot())


def _bound(value: float) -> str:
    if value == math.inf:
        return "+Inf"
    return str(int(value)) if value.is_integer() else floatToGoString(value)


def _family(view: FamilyView) -> Metric:
    family = Metric(view.name, view.description, view.kind)
    for series in view.series:
        labels = dict(series.labels)
        if series.buckets is None:
            family.add_sample(view.name, labels, series.value)
            continue
        cumulative = 0
        for bound, count in zip((*series.buckets, math.inf), series.counts, strict=True):
            cumulative += count
            family.add_sample(f"{view.name}_bucket", {**labels, "le": _bound(bound)}, cumulative)
        family.add_sample(f"{view.name}_sum", labels, series.value)
        family.add_sample(f"{view.name}_count", labels, series.count)
    return family
