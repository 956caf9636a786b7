"""The schema of a tuning run's results: what `summary.json` (and `trials.json`) hold, one
versioned set of dataclasses that the writer (tuner/results.py), the HTML report and the
console all use.

`RunSummary.to_json()` is the file's content; `RunSummary.from_json(data, source)` reads it
back. Version 2 added `schema_version` and the budget as numbers (`{"percentile": 95,
"limit_us": 20000.0}`); version 1 summaries (no `schema_version`, the budget as text such as
"p95 <= 20 ms", trial 0 possibly named `default`) are still read. A newer or unknown version
is refused with a `ReportError` naming the file. `remeasure` (the top candidates measured
again before the write, tuner/remeasure_result.py) is optional: files without it still read.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from tuner.budget import LatencyBudget
from tuner.candidate import Candidate
from tuner.duration import Duration
from tuner.errors import EXIT_NO_FEASIBLE, EXIT_NOT_TUNED, EXIT_OK, ReportError
from tuner.remeasure_result import RemeasureResult
from tuner.search_types import TrialOutcome, TrialRecord

SCHEMA_VERSION = 2
SUMMARY_FILE = "summary.json"


@dataclass(frozen=True, slots=True)
class PlatformInfo:
    """The machine the run measured on."""

    cpu_count: int
    gpu: bool = False  # GPU instances were part of the search (of at least one model)
    gpu_names: tuple[str, ...] = ()  # the GPUs the machine has, usable or not

    def describe(self) -> str:
        """E.g. '2 CPU cores, no GPU' or '16 CPU cores, 1 GPU (NVIDIA H200)'."""
        text = f"{self.cpu_count} CPU cores, "
        if not self.gpu_names:
            return text + ("a GPU" if self.gpu else "no GPU")
        count = len(self.gpu_names)
        text += f"{count} GPU{'s' if count > 1 else ''} ({', '.join(self.gpu_names)})"
        return text if self.gpu else text + ", not usable by the model's backend here"

    def to_json(self) -> dict[str, Any]:
        return {"cpu_count": self.cpu_count, "gpu": self.gpu, "gpus": list(self.gpu_names)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PlatformInfo:
        names = tuple(str(n) for n in data.get("gpus", ()))
        return cls(int(data["cpu_count"]), bool(data.get("gpu")), names)


@dataclass(frozen=True, slots=True)
class ConfigChange:
    """One config field the best configuration changed: `old` -> `new` as config text."""

    field: str
    old: str
    new: str

    def to_json(self) -> dict[str, Any]:
        return {"field": self.field, "old": self.old, "new": self.new}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ConfigChange:
        return cls(str(data["field"]), str(data["old"]), str(data["new"]))


@dataclass(frozen=True, slots=True)
class WrittenFiles:
    """What the write-back wrote: the config, the backup of the previous one ("" when there
    was none), the model files copied (comma-separated) and where the config came from."""

    config: str
    backup: str = ""
    model_files: str = ""
    source: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "backup": self.backup,
            "model_files": self.model_files,
            "source": self.source,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WrittenFiles:
        return cls(
            str(data["config"]),
            str(data.get("backup") or ""),
            str(data.get("model_files") or ""),
            str(data.get("source") or ""),
        )


@dataclass(frozen=True, slots=True)
class PipelineStep:
    """One composing model of a tuned pipeline, in step order: its part of the best
    configuration (`best`, the candidate key; "" when none), the fields that changed and what
    was written for it."""

    model: str
    best: str = ""
    changes: tuple[ConfigChange, ...] = ()
    written: WrittenFiles | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "best": self.best,
            "changes": [c.to_json() for c in self.changes],
            "written": {} if self.written is None else self.written.to_json(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PipelineStep:
        written = data.get("written") or {}
        return cls(
            model=str(data["model"]),
            best=str(data.get("best") or ""),
            changes=tuple(ConfigChange.from_json(c) for c in data.get("changes") or ()),
            written=WrittenFiles.from_json(written) if written else None,
        )


@dataclass(frozen=True, slots=True)
class AccuracyResult:
    """A reduced precision's accuracy check against fp32 (value and drop None when the
    metric was not finite)."""

    metric: str
    value: float | None
    drop: float | None
    limit: float
    passed: bool
    reason: str
    source: str

    def to_json(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "value": _finite(self.value),
            "drop": _finite(self.drop),
            "limit": self.limit,
            "passed": self.passed,
            "reason": self.reason,
            "source": self.source,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AccuracyResult:
        return cls(
            metric=str(data.get("metric") or ""),
            value=_optional_float(data.get("value")),
            drop=_optional_float(data.get("drop")),
            limit=float(data["limit"]),
            passed=bool(data.get("passed")),
            reason=str(data.get("reason") or ""),
            source=str(data.get("source") or ""),
        )


@dataclass(frozen=True, slots=True)
class VariantResult:
    """One precision variant: how it was made, whether it may be searched, and why."""

    precision: str
    usable: bool
    method: str = ""
    error: str | None = None
    cached: bool = False
    build_seconds: float = 0.0
    verdict: str = ""
    accuracy: AccuracyResult | None = None

    @property
    def failed(self) -> bool:
        """Unusable: it could not be built, or it failed the accuracy check."""
        return self.error is not None or (self.accuracy is not None and not self.accuracy.passed)

    def to_json(self) -> dict[str, Any]:
        return {
            "precision": self.precision,
            "usable": self.usable,
            "method": self.method,
            "error": self.error,
            "cached": self.cached,
            "build_seconds": self.build_seconds,
            "verdict": self.verdict,
            "accuracy": None if self.accuracy is None else self.accuracy.to_json(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> VariantResult:
        accuracy = data.get("accuracy")
        return cls(
            precision=str(data["precision"]),
            usable=bool(data.get("usable")),
            method=str(data.get("method") or ""),
            error=None if data.get("error") is None else str(data["error"]),
            cached=bool(data.get("cached")),
            build_seconds=float(data.get("build_seconds") or 0.0),
            verdict=str(data.get("verdict") or ""),
            accuracy=None if accuracy is None else AccuracyResult.from_json(accuracy),
        )


def trial_to_json(trial: TrialRecord) -> dict[str, Any]:
    """One trial as `summary.json` and `trials.json` hold it."""
    return {
        "number": trial.number,
        "state": trial.state,
        "feasible": trial.feasible,
        "candidate": trial.candidate.to_json() if trial.candidate is not None else None,
        "key": trial.candidate.key if trial.candidate is not None else None,
        "as_written": trial.as_written,
        "outcome": trial.outcome.to_json() if trial.outcome is not None else None,
        "duration_s": trial.duration_s,
        "reused_from": trial.reused_from,
    }


def trial_from_json(data: Mapping[str, Any]) -> TrialRecord:
    """One trial as `trial_to_json` wrote it (a missing state reads as FAIL)."""
    candidate = data.get("candidate")
    outcome = data.get("outcome")
    duration = data.get("duration_s")
    reused = data.get("reused_from")
    return TrialRecord(
        number=int(data["number"]),
        state=data.get("state", "FAIL"),
        candidate=None if candidate is None else Candidate.from_json(candidate),
        outcome=TrialOutcome.from_json(outcome) if outcome else None,
        feasible=bool(data.get("feasible")),
        duration_s=None if duration is None else float(duration),
        reused_from=None if reused is None else int(reused),
        as_written=bool(data.get("as_written", False)),
    )


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """The server the trials measured: its name and version (its metadata), its address, and
    how the run had it ("private": started by the run; "remote": someone else's)."""

    name: str
    version: str
    address: str
    launch: str = "private"

    def describe(self) -> str:
        """E.g. 'triton 2.51.0 (private, 127.0.0.1:8000)'."""
        return f"{self.name} {self.version}".strip() + f" ({self.launch}, {self.address})"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "address": self.address,
            "launch": self.launch,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ServerInfo:
        return cls(
            str(data.get("name", "")),
            str(data.get("version", "")),
            str(data.get("address", "")),
            str(data.get("launch", "private")),
        )


@dataclass(frozen=True, slots=True)
class RunSummary:
    """One model's tuning run: the budget, every trial, trial 0 as written (the config
    exactly as written, `as_written_config`), the best (None when no configuration met the
    limits), the changed fields, what was written, the precision variants and the search.
    For an ensemble tuned as a pipeline, `pipeline` lists its composing models in step order
    (`changes` and `written` then cover them all, each field named after its model)."""

    model: str
    budget: LatencyBudget
    platform: PlatformInfo
    study: str
    stop_reason: str
    trials: tuple[TrialRecord, ...]
    as_written: TrialRecord | None
    best: TrialRecord | None
    lowest_latency: TrialRecord | None
    as_written_config: str = ""
    changes: tuple[ConfigChange, ...] = ()
    written: WrittenFiles | None = None
    variants: tuple[VariantResult, ...] = ()
    validation_source: str = ""
    space: tuple[str, ...] = ()
    pipeline: tuple[PipelineStep, ...] = ()
    # A traffic mix (models tuned jointly under a mixed load): (model, its share of the
    # requests) in the mix's order; `pipeline` then lists the models, each with its part of
    # the best.
    traffic_mix: tuple[tuple[str, float], ...] = ()
    # The top candidates re-measured before the write: `best` is then its winner (None when
    # none held the budget) and the best's and the as-written's figures its medians.
    remeasure: RemeasureResult | None = None
    server: ServerInfo | None = None  # the server tuned (None: a summary from before)
    schema_version: ClassVar[int] = SCHEMA_VERSION

    @property
    def exit_code(self) -> int:
        """0 with a best config; 3 when configs were measured but none met the limits; 1 when
        none could be measured at all (the model does not load, say)."""
        if self.best is not None:
            return EXIT_OK
        return EXIT_NO_FEASIBLE if self.unmeasured_reason is None else EXIT_NOT_TUNED

    @property
    def unmeasured_reason(self) -> str | None:
        """Why no trial gave a measurement (the first failure's message), or None when some
        trial did."""
        trials = self.trials
        if any(t.outcome is not None and t.outcome.measured for t in trials):
            return None
        failed = next((t for t in trials if t.outcome is not None and t.outcome.message), None)
        if failed is None or failed.outcome is None:
            return self.stop_reason or "no trial ran"
        return f"trial {failed.number}: {failed.outcome.message}"

    def to_json(self) -> dict[str, Any]:
        def trial(record: TrialRecord | None) -> dict[str, Any] | None:
            return None if record is None else trial_to_json(record)

        return {
            "schema_version": self.schema_version,
            "model": self.model,
            "budget": {"percentile": self.budget.percentile, "limit_us": self.budget.limit.us},
            "platform": self.platform.to_json(),
            "study": self.study,
            "stop_reason": self.stop_reason,
            "space": list(self.space),
            "as_written": trial(self.as_written),
            "as_written_config": self.as_written_config,
            "best": trial(self.best),
            "lowest_latency": trial(self.lowest_latency),
            "changes": [c.to_json() for c in self.changes],
            "written": {} if self.written is None else self.written.to_json(),
            "validation_source": self.validation_source,
            "variants": [v.to_json() for v in self.variants],
            "trials": [trial_to_json(t) for t in self.trials],
            "pipeline": [step.to_json() for step in self.pipeline],
            "traffic_mix": dict(self.traffic_mix),
            "remeasure": None if self.remeasure is None else self.remeasure.to_json(),
            "server": None if self.server is None else self.server.to_json(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], source: str = SUMMARY_FILE) -> RunSummary:
        """Read a summary back; ReportError naming `source` when it is not one this version
        of autotune can read."""
        version = data.get("schema_version", 1) if isinstance(data, Mapping) else None
        if version not in (1, SCHEMA_VERSION) or isinstance(version, bool):
            raise ReportError(
                f"{source}: unknown schema_version {version!r} (this autotune reads 1 to "
                f"{SCHEMA_VERSION}); it was written by another version of autotune"
            )
        try:
            if version == 1:
                data = _from_version_1(data)
            return cls._from_current(data)
        except KeyError as exc:
            raise ReportError(f"{source} is not a tuning summary: it has no {exc}") from None
        except (TypeError, ValueError, AttributeError) as exc:
            raise ReportError(f"{source} is not a tuning summary: {exc}") from None

    @classmethod
    def _from_current(cls, data: Mapping[str, Any]) -> RunSummary:
        def trial(entry: Mapping[str, Any] | None) -> TrialRecord | None:
            return None if entry is None else trial_from_json(entry)

        budget = data["budget"]
        written = data.get("written") or {}
        remeasure = data.get("remeasure")
        return cls(
            model=str(data["model"]),
            budget=LatencyBudget(int(budget["percentile"]), Duration(float(budget["limit_us"]))),
            platform=PlatformInfo.from_json(data.get("platform") or {"cpu_count": 0}),
            study=str(data.get("study") or ""),
            stop_reason=str(data.get("stop_reason") or ""),
            trials=tuple(trial_from_json(t) for t in data.get("trials") or ()),
            as_written=trial(data.get("as_written")),
            best=trial(data.get("best")),
            lowest_latency=trial(data.get("lowest_latency")),
            as_written_config=str(data.get("as_written_config") or ""),
            changes=tuple(ConfigChange.from_json(c) for c in data.get("changes") or ()),
            written=WrittenFiles.from_json(written) if written else None,
            variants=tuple(VariantResult.from_json(v) for v in data.get("variants") or ()),
            validation_source=str(data.get("validation_source") or ""),
            space=tuple(str(line) for line in data.get("space") or ()),
            pipeline=tuple(PipelineStep.from_json(step) for step in data.get("pipeline") or ()),
            traffic_mix=tuple(
                (str(model), float(share))
                for model, share in dict(data.get("traffic_mix") or {}).items()
            ),
            remeasure=RemeasureResult.from_json(remeasure) if remeasure else None,
            server=ServerInfo.from_json(data["server"]) if data.get("server") else None,
        )


def _from_version_1(data: Mapping[str, Any]) -> dict[str, Any]:
    """A version 1 summary in version 2's shape: the budget text ("p95 <= 20 ms", as
    `LatencyBudget.describe` wrote it) as numbers, trial 0 under `as_written` (the first
    version 1 files named it `default`)."""
    text = str(data["budget"])
    head, sep, limit = text.partition(" <= ")
    if not sep or not head.startswith("p") or not head[1:].isdigit():
        raise ValueError(f"budget {text!r} is not 'p<percentile> <= <limit>'")
    budget = LatencyBudget(int(head[1:]), Duration.parse(limit.replace(" ", ""), "latency"))
    upgraded = dict(data)
    upgraded["budget"] = {"percentile": budget.percentile, "limit_us": budget.limit.us}
    upgraded["as_written"] = data.get("as_written", data.get("default"))
    return upgraded


def read_summary(folder: Path) -> RunSummary:
    """`folder`/summary.json; ReportError naming the file when it cannot be read."""
    path = folder / SUMMARY_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ReportError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, Mapping):
        raise ReportError(f"{path} is not a tuning summary: it holds no JSON object")
    return RunSummary.from_json(data, str(path))


def trials_json(trials: Sequence[TrialRecord]) -> str:
    """trials.json: the trials as summary.json lists them."""
    return json.dumps([trial_to_json(t) for t in trials], indent=2) + "\n"


def summary_json(summary: RunSummary) -> str:
    """summary.json's text: the summary as indented JSON."""
    return json.dumps(summary.to_json(), indent=2) + "\n"


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)
