"""Custom metrics: the Prometheus families python models define with `pb_utils.MetricFamily`.

The server holds every value here; a model's stub only sends operations (`apply`). Families and
metrics are reference counted as Triton counts them: the same family name gives the same family
(its first description kept; another kind is refused), the same labels in a family give the same
metric, and a metric disappears when the last object referring to it is dropped. References are
held per owner (one model instance's stub), so `release(owner)` drops what a stopped stub held.
"""

from __future__ import annotations

import bisect
import itertools
import math
import re
import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from common.invariant import present

KINDS = ("counter", "gauge", "histogram")
RESERVED_PREFIX = "nv_"  # the server's own families

Labels = tuple[tuple[str, str], ...]

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


@dataclass(frozen=True, slots=True)
class SeriesView:
    """One metric at a moment. A histogram's `counts` are per bucket (not cumulative), the last
    one for +Inf, and `value` is its sum."""

    labels: Labels
    value: float
    buckets: tuple[float, ...] | None = None
    counts: tuple[int, ...] = ()
    count: int = 0


@dataclass(frozen=True, slots=True)
class FamilyView:
    """One family at a moment, as /metrics shows it: its name, description, kind (counter, gauge or
    histogram) and its metrics."""

    name: str
    description: str
    kind: str
    series: tuple[SeriesView, ...]


@dataclass(slots=True)
class _Series:
    """One metric: a value, or for a histogram its buckets' counts, sum and count."""

    buckets: tuple[float, ...] | None
    value: float = 0.0
    counts: list[int] = field(default_factory=list)  # per bucket, not cumulative; last is +Inf
    count: int = 0
    refs: dict[Hashable, int] = field(default_factory=dict)


@dataclass(slots=True)
class _Family:
    description: str
    kind: str
    series: dict[Labels, _Series] = field(default_factory=dict)
    refs: dict[Hashable, int] = field(default_factory=dict)


def _hold(refs: dict[Hashable, int], owner: Hashable) -> None:
    refs[owner] = refs.get(owner, 0) + 1


def _let_go(refs: dict[Hashable, int], owner: Hashable) -> None:
    left = refs.get(owner, 0) - 1
    if left > 0:
        refs[owner] = left
    else:
        refs.pop(owner, None)


def describe(family: str, labels: Labels) -> str:
    """How errors name a metric: `metric requests{model='m'}`."""
    return f"metric {family}{{" + ", ".join(f"{k}={v!r}" for k, v in labels) + "}"


class CustomMetrics:
    """The registry of custom metrics; thread-safe (stubs' messages and scrapes may race)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._families: dict[str, _Family] = {}

    def apply(self, op: str, args: tuple[object, ...], owner: Hashable = "") -> float | None:
        """One operation from a model, as `pb_utils` sends it:

        ("family", (name, description, kind)), ("metric", (name, labels, buckets or None)),
        ("increment" | "set" | "observe", (name, labels, value)), ("value", (name, labels)) ->
        the value, ("drop_metric", (name, labels)), ("drop_family", (name,)).
        `labels` is `tuple(sorted(labels.items()))`. Misuse raises ValueError naming the family
        and labels; the registry is left as it was."""
        handler = _OPS.get(op)
        if handler is None:
            raise ValueError(f"unknown custom metric operation {op!r}; known: {', '.join(_OPS)}")
        with self._lock:
            return handler(self, args, owner)

    def release(self, owner: Hashable) -> None:
        """Drop every reference `owner` holds (its stub stopped without dropping them)."""
        with self._lock:
            for name, family in list(self._families.items()):
                for labels, series in list(family.series.items()):
                    series.refs.pop(owner, None)
                    if not series.refs:
                        del family.series[labels]
                family.refs.pop(owner, None)
                if not family.refs and not family.series:
                    del self._families[name]

    def snapshot(self) -> list[FamilyView]:
        """A copy of the families with at least one metric, for the /metrics exposition."""
        with self._lock:
            return [
                FamilyView(name, family.description, family.kind, _views(family))
                for name, family in self._families.items()
                if family.series
            ]

    # -- operations, under the lock ------------------------------------------------------------

    def _family_op(self, args: tuple[object, ...], owner: Hashable) -> None:
        name, description, kind = _unpack(args, 3, "family", "(name, description, kind)")
        name = check_family(name, description, kind)
        family = self._families.get(name)
        if family is None:
            family = self._families[name] = _Family(str(description), str(kind))
        elif family.kind != kind:
            raise ValueError(
                f"metric family '{name}' is already registered as a {family.kind}; it cannot be "
                f"registered again as a {kind}"
            )
        _hold(family.refs, owner)
        return None

    def _metric_op(self, args: tuple[object, ...], owner: Hashable) -> None:
        name, labels, buckets = _unpack(args, 3, "metric", "(name, labels, buckets)")
        family, key = self._family(name), labels_key(str(name), labels)
        where = describe(str(name), key)
        bounds = check_buckets(family.kind, where, buckets)
        if bounds is not None and any(label == "le" for label, _ in key):
            raise ValueError(f"{where}: 'le' is the histogram's bucket label; name it otherwise")
        series = family.series.get(key)
        if series is None:
            series = family.series[key] = _Series(bounds)
            if bounds is not None:
                series.counts = [0] * (len(bounds) + 1)
        elif series.buckets != bounds:
            raise ValueError(f"{where} already exists with buckets {list(series.buckets or ())}")
        _hold(series.refs, owner)
        return None

    def _increment_op(self, args: tuple[object, ...], owner: Hashable) -> None:
        series, value = self._update(args, "increment")
        series.value += value
        return None

    def _set_op(self, args: tuple[object, ...], owner: Hashable) -> None:
        series, value = self._update(args, "set")
        series.value = value
        return None

    def _observe_op(self, args: tuple[object, ...], owner: Hashable) -> None:
        series, value = self._update(args, "observe")
        buckets = present(series.buckets, "only histograms observe, and they have buckets")
        series.counts[bisect.bisect_left(buckets, value)] += 1
        series.count += 1
        series.value += value  # a histogram's value is its sum
        return None

    def _value_op(self, args: tuple[object, ...], owner: Hashable) -> float:
        name, labels = _unpack(args, 2, "value", "(name, labels)")
        family, series, where = self._series(name, labels)
        check_operation(family.kind, "value", where)
        return series.value

    def _drop_metric_op(self, args: tuple[object, ...], owner: Hashable) -> None:
        name, labels = _unpack(args, 2, "drop_metric", "(name, labels)")
        family, series, _ = self._series(name, labels)
        _let_go(series.refs, owner)
        if not series.refs:
            family.series = {k: s for k, s in family.series.items() if s is not series}
            if not family.refs and not family.series:
                del self._families[str(name)]
        return None

    def _drop_family_op(self, args: tuple[object, ...], owner: Hashable) -> None:
        (name,) = _unpack(args, 1, "drop_family", "(name,)")
        family = self._family(name)
        _let_go(family.refs, owner)
        if not family.refs and not family.series:
            del self._families[str(name)]
        return None

    # -- lookups -------------------------------------------------------------------------------

    def _family(self, name: object) -> _Family:
        family = self._families.get(name) if isinstance(name, str) else None
        if family is None:
            raise ValueError(f"metric family {name!r} is not registered (or was deleted)")
        return family

    def _series(self, name: object, labels: object) -> tuple[_Family, _Series, str]:
        family, key = self._family(name), labels_key(str(name), labels)
        where = describe(str(name), key)
        series = family.series.get(key)
        if series is None:
            raise ValueError(f"{where} does not exist (it was never created, or was deleted)")
        return family, series, where

    def _update(self, args: tuple[object, ...], op: str) -> tuple[_Series, float]:
        name, labels, value = _unpack(args, 3, op, "(name, labels, value)")
        family, series, where = self._series(name, labels)
        return series, check_operation(family.kind, op, where, value)


_Op = Callable[[CustomMetrics, tuple[object, ...], Hashable], float | None]
_OPS: dict[str, _Op] = {
    "family": CustomMetrics._family_op,
    "metric": CustomMetrics._metric_op,
    "increment": CustomMetrics._increment_op,
    "set": CustomMetrics._set_op,
    "observe": CustomMetrics._observe_op,
    "value": CustomMetrics._value_op,
    "drop_metric": CustomMetrics._drop_metric_op,
    "drop_family": CustomMetrics._drop_family_op,
}


def _unpack(args: object, size: int, op: str, form: str) -> tuple[object, ...]:
    if not isinstance(args, tuple | list) or len(args) != size:
        raise ValueError(f"custom metric operation {op!r} takes {form}, got {args!r}")
    return tuple(args)


def check_family(name: object, description: object, kind: object) -> str:
    """The family's name, once name, description and kind are valid."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(
            f"metric family name {name!r} is not a valid Prometheus metric name "
            "([a-zA-Z_:][a-zA-Z0-9_:]*)"
        )
    if name.startswith(RESERVED_PREFIX):
        raise ValueError(
            f"metric family name {name!r}: the prefix '{RESERVED_PREFIX}' is reserved for the "
            "server's own metrics"
        )
    if not isinstance(description, str):
        raise ValueError(f"metric family '{name}': description must be a string")
    if kind not in KINDS:
        raise ValueError(
            f"metric family '{name}': unknown kind {kind!r}; expected one of {', '.join(KINDS)}"
        )
    return name


def check_operation(kind: str, op: str, where: str, value: object = 0.0) -> float:
    """`value` as a float once `op` ("increment", "set", "observe", "value") suits a metric of
    `kind`; Triton's rules: a counter only goes up and is never set, only a histogram observes,
    and a histogram has no single value."""
    if op == "value" and kind == "histogram":
        raise ValueError(f"{where}: a histogram does not support value")
    if op == "increment" and kind == "histogram":
        raise ValueError(f"{where}: a histogram does not support increment; use observe")
    if op == "set" and kind != "gauge":
        raise ValueError(f"{where}: a {kind} does not support set; only a gauge does")
    if op == "observe" and kind != "histogram":
        raise ValueError(f"{where}: a {kind} does not support observe; only a histogram does")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{where}: {op} needs a number, got {type(value).__name__}")
    if math.isnan(value):
        raise ValueError(f"{where}: {op} got NaN")
    if op == "increment" and kind == "counter" and value < 0:
        raise ValueError(
            f"{where}: a counter can only be incremented monotonically by non-negative values, "
            f"got {value!r}"
        )
    return float(value)


def labels_key(family: str, labels: object) -> Labels:
    """Valid labels as sorted (name, value) pairs; `labels` is such pairs already."""
    if not isinstance(labels, tuple | list):
        raise ValueError(f"metric family '{family}': labels must be (name, value) pairs")
    pairs: list[tuple[str, str]] = []
    for pair in labels:
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise ValueError(f"metric family '{family}': labels must be (name, value) pairs")
        key, value = pair
        if not isinstance(key, str) or not _LABEL.fullmatch(key) or key.startswith("__"):
            raise ValueError(
                f"metric family '{family}': label name {key!r} is not a valid Prometheus label "
                "name ([a-zA-Z_][a-zA-Z0-9_]*, not starting with '__')"
            )
        if not isinstance(value, str):
            raise ValueError(
                f"metric family '{family}': label {key!r} must have a string value, "
                f"got {type(value).__name__}"
            )
        pairs.append((key, value))
    result = tuple(sorted(pairs))
    if len({key for key, _ in result}) != len(result):
        raise ValueError(f"metric family '{family}': a label name is given twice in {result}")
    return result


def check_buckets(kind: str, where: str, buckets: object) -> tuple[float, ...] | None:
    """A histogram's bucket boundaries, as floats; None for a counter or gauge."""
    if kind != "histogram":
        if buckets is not None:
            raise ValueError(f"{where}: buckets are only for histograms, this is a {kind}")
        return None
    if buckets is None:
        raise ValueError(f"{where}: a histogram metric needs buckets (its bucket boundaries)")
    if not isinstance(buckets, tuple | list) or not all(
        isinstance(b, int | float) and not isinstance(b, bool) for b in buckets
    ):
        raise ValueError(f"{where}: buckets must be a list of numbers, got {buckets!r}")
    bounds = tuple(float(b) for b in buckets)
    if any(math.isnan(b) or math.isinf(b) for b in bounds):
        raise ValueError(f"{where}: bucket boundaries must be finite (+Inf is always added)")
    if any(a >= b for a, b in itertools.pairwise(bounds)):
        raise ValueError(f"{where}: bucket boundaries must be strictly increasing, got {buckets}")
    return bounds


def _views(family: _Family) -> tuple[SeriesView, ...]:
    return tuple(
        SeriesView(labels, s.value, s.buckets, tuple(s.counts), s.count)
        for labels, s in family.series.items()
    )
