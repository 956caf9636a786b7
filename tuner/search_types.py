"""The values the search loop takes and gives: settings, trial outcomes, records, progress."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from tuner.budget import LatencyBudget
from tuner.candidate import Candidate
from tuner.duration import Duration
from tuner.errors import TunerError

OutcomeStatus = Literal["ok", "failed", "pruned"]
TrialStateName = Literal["COMPLETE", "PRUNED", "FAIL", "RUNNING", "WAITING"]
ProgressKind = Literal["start", "trial_start", "trial_end", "end"]
# The outcome metric holding the GPU memory the server's processes held after the trial's
# load search (bytes; absent without a GPU).
GPU_MEMORY_METRIC = "gpu_memory_bytes"


class SearchError(TunerError):
    """The study cannot be opened or continued (storage, name, or a different objective)."""


@dataclass(frozen=True, slots=True)
class TrialOutcome:
    """What evaluating one candidate gave.

    status: "ok" (measured), "pruned" (cut short, e.g. the latency at concurrency 1 is already
    over budget: give what was measured) or "failed" (could not be measured: `message` says
    why). `latency_us` is the budget's percentile at the load where `throughput` (inferences/s)
    was measured; `accuracy_ok` is False when a reduced precision failed the accuracy check.
    """

    status: OutcomeStatus
    throughput: float = 0.0
    latency_us: float | None = None
    accuracy_ok: bool = True
    metrics: Mapping[str, float] = field(default_factory=dict)
    message: str = ""

    @classmethod
    def failed(cls, message: str) -> TrialOutcome:
        return cls("failed", message=message)

    @property
    def measured(self) -> bool:
        """Whether the server gave a figure: a failed trial did not, nor did a candidate pruned
        before any load was run (refused by the server, or a precision it cannot have)."""
        if self.status == "failed":
            return False
        return self.status == "ok" or self.latency_us is not None

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "throughput": self.throughput,
            "latency_us": self.latency_us,
            "accuracy_ok": self.accuracy_ok,
            "metrics": {k: _json_float(v) for k, v in self.metrics.items()},
            "message": self.message,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TrialOutcome:
        return cls(
            status=data["status"],
            throughput=float(data.get("throughput", 0.0)),
            latency_us=None if data.get("latency_us") is None else float(data["latency_us"]),
            accuracy_ok=bool(data.get("accuracy_ok", True)),
            metrics={
                k: math.nan if v is None else float(v)
                for k, v in dict(data.get("metrics") or {}).items()
            },
            message=str(data.get("message", "")),
        )


def _json_float(value: float) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def _never_prune(_step: int, _throughput: float) -> bool:
    return False


@dataclass(frozen=True, slots=True)
class TrialContext:
    """What the search loop tells the evaluation of one trial.

    `incumbent` is the best feasible outcome of the study so far (None before the first), so
    that an evaluation can start its load search where that one saturated and stop early when
    it cannot win. `report(step, throughput)` hands an intermediate value (the throughput
    measured at load step `step`) to the study's pruner and answers True when the trial should
    stop now: the evaluation then returns a "pruned" outcome with what it measured."""

    number: int = 0
    incumbent: TrialOutcome | None = None
    report: Callable[[int, float], bool] = _never_prune


@dataclass(frozen=True, slots=True)
class SearchSettings:
    """How to search.

    `storage` is an Optuna storage URL (`search_study.sqlite_url(path)`; None: in memory, for
    tests); a study of the same name in it is resumed when `load_if_exists`. `n_trials` counts
    the measurements of the whole study, resumed and other workers' included (None: no limit).
    `time_budget` bounds this call. The objective: maximise throughput subject to `budget`,
    `min_throughput` and the accuracy check."""

    budget: LatencyBudget
    study_name: str
    storage: str | None = None
    mode: Literal["optuna", "grid"] = "optuna"
    method: str = "optuna"  # the sampler when mode is "optuna": a name of tuner.samplers.METHODS
    n_trials: int | None = 30
    time_budget: Duration | None = None
    seed: int | None = 0
    load_if_exists: bool = True
    min_throughput: float | None = None
    # The GPU memory the server may hold (its processes, every GPU) at the trial's load.
    max_gpu_memory_bytes: int | None = None
    n_startup_trials: int | None = None  # TPE's random start; None: from n_trials
    stale_after_s: float = 120.0  # a RUNNING trial with no heartbeat this long is dead
    claim_within_s: float = 5.0  # a RUNNING trial no worker claimed this long after its ask
    heartbeat_s: float = 10.0
    # Stop when the best feasible throughput has not grown by more than `patience_min_gain`
    # (a share) over the last `patience` measured trials (None: never; not in grid mode).
    patience: int | None = None
    patience_min_gain: float = 0.01
    # Anything else the outcome depends on (accuracy limit, model hash...): a study created
    # with other values is not resumed.
    fingerprint: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.n_trials is not None and self.n_trials < 1:
            raise ValueError(f"n_trials must be >= 1, got {self.n_trials}")
        if self.time_budget is not None and self.time_budget.us <= 0:
            raise ValueError(f"time_budget must be > 0, got {self.time_budget}")
        if self.max_gpu_memory_bytes is not None and self.max_gpu_memory_bytes <= 0:
            raise ValueError(f"max_gpu_memory_bytes must be > 0, got {self.max_gpu_memory_bytes}")
        if self.min_throughput is not None and self.min_throughput <= 0:
            raise ValueError(f"min_throughput must be > 0, got {self.min_throughput}")
        if self.patience is not None and self.patience < 1:
            raise ValueError(f"patience must be >= 1, got {self.patience}")
        if not 0 <= self.patience_min_gain < 1:
            raise ValueError(f"patience_min_gain must be in [0, 1), got {self.patience_min_gain}")
        if not self.study_name:
            raise ValueError("study_name must not be empty")

    def constraints(self, outcome: TrialOutcome) -> dict[str, float]:
        """Optuna constraint values (<= 0 feasible), relative to the limits so that they add
        up sensibly: latency / limit - 1, 1 - throughput / min_throughput, accuracy 0 or 1,
        GPU memory used / max_gpu_memory_bytes - 1 (a trial with no GPU memory figure, one
        that never loaded, is not held against the limit)."""
        latency = outcome.latency_us if outcome.latency_us is not None else math.inf
        values = {
            "latency": min(latency / self.budget.limit_us - 1.0, 1e6),
            "accuracy": 0.0 if outcome.accuracy_ok else 1.0,
        }
        if self.min_throughput is not None:
            values["throughput"] = 1.0 - outcome.throughput / self.min_throughput
        if self.max_gpu_memory_bytes is not None:
            used = outcome.metrics.get(GPU_MEMORY_METRIC, 0.0)
            values["gpu_memory"] = used / self.max_gpu_memory_bytes - 1.0
        return values

    def feasible(self, outcome: TrialOutcome) -> bool:
        """Measured in full and within every constraint."""
        return outcome.status == "ok" and all(v <= 0 for v in self.constraints(outcome).values())


@dataclass(frozen=True, slots=True)
class TrialRecord:
    """One trial of the study, whoever ran it. `outcome` is None for a trial still running or
    one that never finished (its process died: state FAIL). The as-written trial's candidate
    is the empty one when the config is no point of the space (it changes nothing)."""

    number: int
    state: TrialStateName
    candidate: Candidate | None
    outcome: TrialOutcome | None
    feasible: bool
    duration_s: float | None
    reused_from: int | None = None  # the trial whose measurement was reused
    worker: str = ""
    as_written: bool = False  # the model's config exactly as written (trial 0)
    measuring: bool = False  # running, and its worker decided to measure it
    waiting: bool = False  # running, and waiting for another trial's measurement to reuse

    @property
    def interrupted(self) -> bool:
        return self.state == "FAIL" and self.outcome is None

    @property
    def undecided(self) -> bool:
        """Running, and its worker has not yet said whether it measures or reuses (it was
        asked a moment ago): whether it counts toward n_trials is not known yet."""
        return (
            self.state == "RUNNING"
            and not self.measuring
            and not self.waiting
            and self.reused_from is None
        )

    @property
    def label(self) -> str:
        """The configuration in words: its key, "as written" (with the key when the config
        is a point of the space) for the model's own config."""
        return trial_label(
            self.candidate.key if self.candidate is not None else "", self.as_written
        )


def trial_label(key: str, as_written: bool) -> str:
    """How a trial is named to the user: its key, or "as written" for the config as written."""
    if not as_written:
        return key or "?"
    return f"as written ({key})" if key else "as written"


@dataclass(frozen=True, slots=True)
class ProgressEvent:
    """Sent after the study is opened ("start"), before and after each trial of this process
    ("trial_start", "trial_end"), and at the end ("end", with `stop_reason`)."""

    kind: ProgressKind
    done: int  # trials of the study that count toward n_trials
    total: int | None  # n_trials, or the grid size in grid mode
    elapsed_s: float
    time_left: Duration | None
    best: TrialRecord | None
    trial: TrialRecord | None = None
    stop_reason: str = ""


@dataclass(frozen=True, slots=True)
class SearchResult:
    """The study after the loop: every trial, the best feasible one, why the loop stopped."""

    study_name: str
    trials: list[TrialRecord]
    best: TrialRecord | None
    stop_reason: str
    measured_here: int  # trials this call evaluated
    reused_here: int  # trials this call answered from an earlier measurement

    @property
    def lowest_latency(self) -> TrialRecord | None:
        """The trial with the lowest measured latency (for "no config meets the budget")."""
        measured = [
            (t.outcome.latency_us, t.number, t)
            for t in self.trials
            if t.outcome is not None and t.outcome.latency_us is not None
        ]
        return min(measured, key=lambda item: item[:2], default=(0.0, 0, None))[2]
