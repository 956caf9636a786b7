"""The baseline file (schema 2): what was measured, how, where, and its reading and writing.

```
{"schema": 2, "kind": "autotune-perf-baseline", "recorded_at": ISO-8601 UTC,
 "machine": {...describe_machine()...},
 "settings": {"measurement_interval_ms", "stability_percentage", "max_trials",
              "warmup_request_count", "batch_size", "repeats", "statistic", "protocol"},
 "models": [{"name", "version", "config_sha256",
             "loads": [{"concurrency", "throughput", "p50_us", "p95_us", "p99_us",
                        "avg_us", "request_count", "error_count", "stable"}]}]}
```

Each load's metrics are `statistic` ("median") over `repeats` runs; the gate measures as many
runs and compares the same statistic. Schema 1 files (settings.baseline_repeats, no statistic)
recorded the median as well and are read as such. `protocol` ("http" or "grpc", what the load
spoke) is "http" when absent (baselines recorded before gRPC).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from common.atomic import write_text_atomic

SCHEMA = 2
READABLE_SCHEMAS = (1, 2)
KIND = "autotune-perf-baseline"
DEFAULT_INTERVAL_MS = 1000
MEDIAN = "median"
STATISTICS = (MEDIAN,)  # what a baseline may record: the gate computes the same one
PROTOCOLS = ("http", "grpc")


class BaselineError(Exception):
    """The baseline file is missing or malformed; the message names the file and the problem."""


@dataclass(frozen=True, slots=True)
class GateSettings:
    """How every load is measured; the gate reuses the baseline's settings."""

    measurement_interval_ms: int = DEFAULT_INTERVAL_MS
    stability_percentage: float = 20.0
    max_trials: int = 8
    warmup_request_count: int = 20
    batch_size: int = 1
    repeats: int = 1  # runs per load, summed up by `statistic`, on both sides of the gate
    statistic: str = MEDIAN
    protocol: str = "http"  # what the load speaks (perf's -i): http | grpc


@dataclass(frozen=True, slots=True)
class LoadPoint:
    """One measurement at a fixed concurrency (latencies in microseconds)."""

    concurrency: int
    throughput: float  # inferences / s
    p50_us: float
    p95_us: float
    p99_us: float
    avg_us: float
    request_count: int
    error_count: int = 0
    stable: bool = True


@dataclass(frozen=True, slots=True)
class ModelBaseline:
    """One model's recorded loads and the hash of the config it was served with ("" in a file
    that has none: the gate then does not compare configs)."""

    name: str
    version: str
    config_sha256: str
    loads: list[LoadPoint]


@dataclass(frozen=True, slots=True)
class Baseline:
    """A whole baseline file; `to_json` is the file's document, schema and kind included."""

    recorded_at: str
    machine: dict[str, Any]
    settings: GateSettings
    models: list[ModelBaseline] = field(default_factory=list)

    def model(self, name: str) -> ModelBaseline | None:
        return next((m for m in self.models if m.name == name), None)

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "kind": KIND, **asdict(self)}


def write_baseline(path: Path, baseline: Baseline) -> None:
    """Atomically: a reader sees the old file or the whole new one."""
    write_text_atomic(path, json.dumps(baseline.to_json(), indent=2) + "\n")


def read_baseline(path: Path) -> Baseline:
    """Read and validate a baseline; BaselineError says what is wrong and where."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BaselineError(
            f"baseline file {path} does not exist (record one with `autotune baseline --out "
            f"{path}`)"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BaselineError(f"baseline file {path} cannot be read: {exc}") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BaselineError(f"baseline file {path} is not valid JSON: {exc}") from None
    try:
        return _parse(document)
    except _Invalid as exc:
        raise BaselineError(f"baseline file {path} is malformed: {exc}") from None


class _Invalid(Exception):
    pass


def _parse(document: Any) -> Baseline:
    root = _object(document, "the top level")
    schema = root.get("schema")
    if isinstance(schema, bool) or schema not in READABLE_SCHEMAS:
        raise _Invalid(
            f"'schema' is {schema!r}; this autotune reads schemas "
            f"{' and '.join(str(s) for s in READABLE_SCHEMAS)} "
            "(record the baseline again with `autotune baseline`)"
        )
    settings = _object(root.get("settings"), "'settings'")
    models = _list(root.get("models"), "'models'")
    if not models:
        raise _Invalid("'models' is empty")
    return Baseline(
        recorded_at=_str(root.get("recorded_at"), "'recorded_at'"),
        machine=_object(root.get("machine"), "'machine'"),
        settings=_settings(settings, schema),
        models=[_model(item, f"models[{i}]") for i, item in enumerate(models)],
    )


def _settings(settings: dict[str, Any], schema: int) -> GateSettings:
    if schema == 1:  # the median of settings.baseline_repeats runs (1 when absent)
        repeats = settings.get("baseline_repeats", 1)
        repeats_where = "settings.baseline_repeats"
        statistic = MEDIAN
    else:
        repeats = settings.get("repeats")
        repeats_where = "settings.repeats"
        statistic = _str(settings.get("statistic"), "settings.statistic")
        if statistic not in STATISTICS:
            raise _Invalid(
                f"settings.statistic is {statistic!r}; this autotune records and compares "
                f"{' or '.join(repr(s) for s in STATISTICS)}"
            )
    protocol = _str(settings.get("protocol", "http"), "settings.protocol")
    if protocol not in PROTOCOLS:
        raise _Invalid(f"settings.protocol is {protocol!r}; expected 'http' or 'grpc'")
    return GateSettings(
        measurement_interval_ms=int(
            _number(settings.get("measurement_interval_ms"), "settings.measurement_interval_ms")
        ),
        stability_percentage=_number(
            settings.get("stability_percentage"), "settings.stability_percentage"
        ),
        max_trials=int(_number(settings.get("max_trials"), "settings.max_trials")),
        warmup_request_count=int(
            _number(settings.get("warmup_request_count"), "settings.warmup_request_count", 0)
        ),
        batch_size=int(_number(settings.get("batch_size"), "settings.batch_size")),
        repeats=_whole(repeats, repeats_where),
        statistic=statistic,
        protocol=protocol,
    )


def _model(value: Any, where: str) -> ModelBaseline:
    item = _object(value, where)
    loads = _list(item.get("loads"), f"{where}.loads")
    if not loads:
        raise _Invalid(f"{where}.loads is empty")
    return ModelBaseline(
        name=_str(item.get("name"), f"{where}.name"),
        version=str(item.get("version", "")),
        config_sha256=str(item.get("config_sha256", "")),
        loads=[_load(load, f"{where}.loads[{i}]") for i, load in enumerate(loads)],
    )


def _load(value: Any, where: str) -> LoadPoint:
    item = _object(value, where)
    return LoadPoint(
        concurrency=int(_number(item.get("concurrency"), f"{where}.concurrency")),
        throughput=_number(item.get("throughput"), f"{where}.throughput"),
        p50_us=_number(item.get("p50_us"), f"{where}.p50_us"),
        p95_us=_number(item.get("p95_us"), f"{where}.p95_us"),
        p99_us=_number(item.get("p99_us"), f"{where}.p99_us"),
        avg_us=_number(item.get("avg_us"), f"{where}.avg_us", 0),
        request_count=int(_number(item.get("request_count"), f"{where}.request_count", 0)),
        error_count=int(_number(item.get("error_count", 0), f"{where}.error_count", 0)),
        stable=bool(item.get("stable", True)),
    )


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Invalid(f"{where} must be a JSON object, not {_kind(value)}")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise _Invalid(f"{where} must be a JSON array, not {_kind(value)}")
    return value


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise _Invalid(f"{where} must be a non-empty string, not {_kind(value)}")
    return value


def _number(value: Any, where: str, minimum: float = 1e-12) -> float:
    """A finite number >= minimum (positive by default)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Invalid(f"{where} must be a number, not {_kind(value)}")
    if not minimum <= float(value) < float("inf"):
        bound = "positive" if minimum > 0 else f"at least {minimum:g}"
        raise _Invalid(f"{where} must be {bound}, not {value}")
    return float(value)


def _whole(value: Any, where: str) -> int:
    """A whole number of at least 1."""
    number = _number(value, where, 0)
    if number < 1 or number != int(number):
        raise _Invalid(f"{where} must be a whole number of at least 1, not {value}")
    return int(number)


def _kind(value: Any) -> str:
    if value is None:
        return "missing (or null)"
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(
        type(value), repr(value)
    )
