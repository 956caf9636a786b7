"""Custom metrics of Triton's python backend API: `MetricFamily` and its `Metric`s, whose
values live in the server (shown on /metrics)."""

from __future__ import annotations

import collections
import contextlib
import enum
from collections.abc import Sequence
from typing import Any

from serve.backends.python.pb_errors import TritonModelException
from serve.backends.python.pb_services import services
from serve.custom_metrics import (
    check_buckets,
    check_family,
    check_operation,
    describe,
    labels_key,
)


class MetricKind(enum.StrEnum):
    """Triton's MetricKind (also MetricFamily.COUNTER, .GAUGE, .HISTOGRAM)."""

    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


class Metric:
    """One custom metric: made by `MetricFamily.Metric(labels, buckets)`, never directly.

    Values live in the server, which shows them in /metrics. Metrics with the same family and
    labels are one metric. As in Triton, the family object keeps the first Metric object of each
    labels alive; unlike Triton (where a Metric whose family object was deleted raises), a Metric
    also keeps its family alive. When neither is referred to any more, the server drops them (at
    the model's next metric call, or when its stub stops)."""

    def __init__(self, family: MetricFamily, labels: tuple[tuple[str, str], ...]) -> None:
        self._family = family
        self._labels = labels
        self._where = describe(family._name, labels)

    def increment(self, value: float) -> None:
        """Add `value` (a counter: non-negative only; a gauge: either sign)."""
        self._update("increment", value, "Failed to increment metric value")

    def set(self, value: float) -> None:
        """Set a gauge to `value`."""
        self._update("set", value, "Failed to set metric value")

    def observe(self, value: float) -> None:
        """Count `value` in a histogram's buckets, sum and count."""
        self._update("observe", value, "Failed to observe metric value")

    def value(self) -> float:
        """A counter's or gauge's current value (a histogram has none)."""
        try:
            check_operation(self._family._kind, "value", self._where)
        except ValueError as exc:
            raise TritonModelException(f"Failed to get metric value: {exc}") from None
        args = (self._family._name, self._labels)
        found = _metric_call("value", args, "Failed to get metric value")
        return 0.0 if found is None else float(found)

    def _update(self, op: str, value: float, failure: str) -> None:
        try:
            number = check_operation(self._family._kind, op, self._where, value)
        except ValueError as exc:
            raise TritonModelException(f"{failure}: {exc}") from None
        _metric_call(op, (self._family._name, self._labels, number))

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter exit the module may be gone
            _dropped.append(("drop_metric", (self._family._name, self._labels)))


_MetricObject = Metric  # MetricFamily.Metric (Triton's name) hides the class inside its body


class MetricFamily:
    """`pb_utils.MetricFamily(name, description, kind)`: a Prometheus family of custom metrics.

    `kind` is COUNTER, GAUGE or HISTOGRAM. The same name gives the same family (the first
    description is kept; another kind raises TritonModelException). The name must be a valid
    Prometheus metric name not starting with `nv_` (the server's own metrics)."""

    COUNTER = MetricKind.COUNTER
    GAUGE = MetricKind.GAUGE
    HISTOGRAM = MetricKind.HISTOGRAM

    def __init__(self, name: str, description: str, kind: str) -> None:
        if isinstance(kind, MetricKind):
            kind = kind.value
        try:
            name = check_family(name, description, kind)
        except ValueError as exc:
            raise TritonModelException(f"Error when creating MetricFamily: {exc}") from None
        _metric_call("family", (name, description, kind), "Error when creating MetricFamily")
        self._name = name
        self._kind = kind
        self._metrics: dict[tuple[tuple[str, str], ...], Metric] = {}

    def Metric(  # Triton's name
        self, labels: dict[str, str] | None = None, buckets: Sequence[float] | None = None
    ) -> _MetricObject:
        """A metric of this family with `labels` (string names and values); a histogram needs
        `buckets`, its strictly increasing bucket boundaries (+Inf is added)."""
        if labels is None:
            labels = {}
        if not isinstance(labels, dict):
            raise TritonModelException("Failed to create metric. Labels must be a dictionary.")
        try:
            key = labels_key(self._name, tuple(labels.items()))
            bounds = check_buckets(self._kind, describe(self._name, key), buckets)
        except ValueError as exc:
            raise TritonModelException(f"Error when creating Metric: {exc}") from None
        args = (self._name, key, None if bounds is None else list(bounds))
        _metric_call("metric", args, "Error when creating Metric")
        metric = _MetricObject(self, key)
        self._metrics.setdefault(key, metric)
        return metric

    def __del__(self) -> None:
        if "_name" in self.__dict__:  # not when __init__ failed
            with contextlib.suppress(Exception):
                _dropped.append(("drop_family", (self._name,)))


# Drops from __del__ wait here: __del__ may run inside a garbage collection at any point, even
# while this thread is sending, so it never sends; the next metric call (or the stub) sends them.
_dropped: collections.deque[tuple[str, tuple[Any, ...]]] = collections.deque()


def flush_dropped_metrics() -> None:
    """Send the drops of deleted Metric and MetricFamily objects (the stub may call this)."""
    server = services()
    while True:
        try:
            op, args = _dropped.popleft()  # another thread may be flushing too
        except IndexError:
            return
        with contextlib.suppress(TritonModelException):  # a drop's failure is not the caller's
            server.metric(op, args)


def _metric_call(op: str, args: tuple[Any, ...], failure: str = "") -> float | None:
    flush_dropped_metrics()
    try:
        return services().metric(op, args)
    except TritonModelException as exc:
        raise TritonModelException(f"{failure}: {exc}" if failure else str(exc)) from None
