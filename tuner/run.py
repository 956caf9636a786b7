"""What every tuning run shares, whatever it tunes (a model alone, a pipeline, a traffic mix:
`tuner.group_run`): the run's options, the study's name, storage and fingerprint, a model's
space and precision variants, the time budget's share for the search and the re-measure."""

from __future__ import annotations

import hashlib
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from serve.api import CONFIG_FILENAME, backend_name, config_to_text
from tuner.budget import LatencyBudget
from tuner.defaults import DEFAULT_MAX_BATCH_SIZE_CAP, RECOMMENDED_SEARCH
from tuner.duration import Duration
from tuner.errors import TunerError
from tuner.evaluate import EvaluationSettings
from tuner.model_batch import accepted_batch_size
from tuner.precision import DEFAULT_CACHE_DIR, PrecisionVariant, prepare_variants
from tuner.precisions import DEFAULT_PRECISIONS, backend_precisions
from tuner.remeasure import (
    Loader,
    Measurer,
    Remeasured,
    RemeasureSettings,
    highest_load,
    pick_top,
    remeasure,
)
from tuner.search_types import ProgressEvent, SearchResult, SearchSettings
from tuner.server_control import TuningServer
from tuner.server_target import AUTOTUNE, ServerChoice
from tuner.space import GPU, Platform, SearchSpace, SpaceOptions, build_space
from tuner.target_platform import confirm_gpu


@dataclass(frozen=True, slots=True)
class TuneOptions:
    """Everything one `autotune` run is asked to do, resolved from the flags (None or empty:
    the default beside the field)."""

    repository: Path
    budget: LatencyBudget
    models: tuple[str, ...] = ()  # empty: every model in the repository
    trials: int | None = None  # None: DEFAULT_TRIALS, DEFAULT_PIPELINE_TRIALS for a pipeline
    time_budget: Duration | None = None  # for the whole run, shared by the models
    search: str = RECOMMENDED_SEARCH
    precisions: tuple[str, ...] = DEFAULT_PRECISIONS
    # False: `precisions` is the default, each model gets those of it that suit its backend
    # and machine; True: every one asked is prepared (or excluded, saying why).
    precisions_explicit: bool = False
    max_accuracy_drop: float = 0.01
    validation_data: Path | None = None
    storage: str | None = None  # default: sqlite in the report folder
    study_name: str | None = None  # default: from the model and the budget
    seed: int = 0
    patience: int | None = None  # stop when the best has not moved over this many trials
    min_throughput: float | None = None
    max_gpu_memory_bytes: int | None = None  # a constraint; only on a machine with a GPU
    dry_run: bool = False
    output_repository: Path | None = None
    report_dir: Path = Path("reports")
    cache_dir: Path = DEFAULT_CACHE_DIR
    evaluation: EvaluationSettings = field(default_factory=EvaluationSettings)
    max_batch_size_cap: int = DEFAULT_MAX_BATCH_SIZE_CAP  # the largest max_batch_size tried
    space: SpaceOptions = field(default_factory=SpaceOptions)  # narrows the search space
    # The top candidates measured again before the write (top 0: not at all).
    remeasure: RemeasureSettings = field(default_factory=RemeasureSettings)
    server: ServerChoice = field(default_factory=ServerChoice)  # the server trials measure


@dataclass(slots=True)
class Hooks:
    """How the run tells the console what it is doing."""

    note: Callable[[str], None] = lambda _message: None
    progress: Callable[[str, ProgressEvent], None] = lambda _model, _event: None


class TuneError(TunerError):
    """A model cannot be tuned at all (its config, its files)."""


def study_name(options: TuneOptions, model: str, fingerprint: dict[str, str]) -> str:
    """The user's name, or one made from the model, the budget, the search and a digest of the
    fingerprint: the same command on a changed model or config (after a write-back, say) starts
    a study of its own instead of clashing with the old one, and on the same one resumes it."""
    if options.study_name:
        return f"{options.study_name}-{model}" if len(options.models) != 1 else options.study_name
    budget = options.budget
    digest = hashlib.sha256(repr(sorted(fingerprint.items())).encode()).hexdigest()[:8]
    return f"{model}-p{budget.percentile}-{budget.limit_us:g}us-{options.search}-{digest}"


def storage_url(options: TuneOptions, report_folder: Path) -> str:
    """The study's storage: `options.storage`, else study.db in `report_folder` (an absolute
    path: the study does not move with the cwd)."""
    if options.storage:
        return options.storage
    return f"sqlite:///{(report_folder / 'study.db').resolve()}"


def search_settings(
    options: TuneOptions,
    name: str,
    fingerprint: dict[str, str],
    report_folder: Path,
    time_budget: Duration | None,
    default_trials: int,
) -> SearchSettings:
    """The search loop's settings for tuning `name` (a model, or an ensemble's pipeline)."""
    return SearchSettings(
        budget=options.budget,
        study_name=study_name(options, name, fingerprint),
        storage=storage_url(options, report_folder),
        mode="grid" if options.search == "grid" else "optuna",
        method=options.search,
        patience=options.patience,
        n_trials=None if options.search == "grid" else options.trials or default_trials,
        time_budget=time_budget,
        seed=options.seed,
        min_throughput=options.min_throughput,
        max_gpu_memory_bytes=options.max_gpu_memory_bytes,
        fingerprint=fingerprint,
    )


def fingerprint_of(
    options: TuneOptions, config: mc.ModelConfig, model_path: Path
) -> dict[str, str]:
    """What a resumed study must share with this run to reuse its measurements."""
    digest = hashlib.sha256()
    with model_path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return {
        "model_sha256": digest.hexdigest()[:16],
        "budget": options.budget.describe(),
        "max_accuracy_drop": f"{options.max_accuracy_drop:g}",
        "precisions": ",".join(options.precisions),
        "base_config": hashlib.sha256(config.SerializeToString(deterministic=True)).hexdigest()[
            :16
        ],
    } | server_fingerprint(options.server)


def server_fingerprint(choice: ServerChoice) -> dict[str, str]:
    """Measurements on one server are not another's: a study made on another server than a
    private `autotune serve` names it (studies made on ours keep their names)."""
    if choice.kind == AUTOTUNE:
        return {}
    return {"server": choice.url if choice.remote else f"tritonserver {choice.tritonserver or ''}"}


def batch_cap(options: TuneOptions, config: mc.ModelConfig, model_path: Path) -> int:
    """The largest max_batch_size the search tries: what the model accepts (its graph's batch
    dimension, not the config, which an earlier run may have lowered), at most
    `max_batch_size_cap`; `options.space.max_batch_cap`, when set, narrows it further."""
    accepted = accepted_batch_size(config, model_path)
    cap = (
        options.max_batch_size_cap
        if accepted is None
        else min(accepted, options.max_batch_size_cap)
    )
    if options.space.max_batch_cap is not None:
        cap = min(cap, options.space.max_batch_cap)
    return cap


def model_space(
    options: TuneOptions,
    config: mc.ModelConfig,
    model_path: Path,
    platform: Platform,
    precisions: tuple[str, ...],
) -> SearchSpace:
    """The model's search space, max_batch_size up to `batch_cap`."""
    return build_space(
        config,
        platform,
        replace(
            options.space,
            precisions=precisions,
            latency_limit=options.budget.limit,
            max_batch_cap=batch_cap(options, config, model_path),
            cpu_fp16=options.precisions_explicit,
        ),
    )


def space_on_target(
    server: TuningServer,
    options: TuneOptions,
    model: str,
    config: mc.ModelConfig,
    model_path: Path,
    platform: Platform,
    precisions: tuple[str, ...],
    hooks: Hooks,
) -> tuple[SearchSpace, Platform]:
    """The model's space on the server it is tuned on: GPU instances confirmed by a test load
    where that server is not ours (`tuner.target_platform.confirm_gpu`)."""
    space = model_space(options, config, model_path, platform, precisions)
    if GPU in space.kinds:
        platform, refused = confirm_gpu(server, model, config, backend_name(config), platform)
        if refused is not None:
            hooks.note(refused)
            space = model_space(options, config, model_path, platform, precisions)
    return space, platform


def search_time_left(
    options: TuneOptions, budget: Duration | None, started: float
) -> Duration | None:
    """What the search may take of `budget`: what is left, less the time the re-measure
    after it needs (about its estimate, at most a third of what is left)."""
    left = time_left(budget, started)
    if left is None or options.remeasure.top == 0:
        return left
    reserve = min(options.remeasure.reserve_s(), left.s / 3)
    return Duration.from_s(max(left.s - reserve, 1e-3))


def remeasure_search(
    options: TuneOptions,
    name: str,
    result: SearchResult,
    load: Loader,
    measure: Measurer,
    budget: Duration | None,
    started: float,
    hooks: Hooks,
) -> Remeasured | None:
    """The search's top candidates measured again on the tuning server (tuner/remeasure.py),
    within what is left of `budget`; None when the re-measure is off or nothing is feasible."""
    settings = options.remeasure
    picked = pick_top(result.trials, settings.top)
    if not picked:
        return None
    trials = ", ".join(str(t.number) for t in picked)
    hooks.note(
        f"{name}: re-measuring trials {trials} ({settings.repeats} interleaved round(s), "
        f"each at its own load; {settings.windows})"
    )
    remeasured = remeasure(
        picked,
        load,
        measure,
        options.budget,
        settings,
        search_best=result.best.number if result.best is not None else None,
        min_throughput=options.min_throughput,
        deadline=None if budget is None else started + budget.s,
        load_ceiling=highest_load(result.trials),
    )
    outcome = remeasured.result
    winner = outcome.candidate(outcome.winner)
    if winner is None or winner.throughput is None:
        hooks.note(f"{name}: no re-measured candidate held {options.budget.describe()}")
    else:
        changed = f" (the search's best was trial {outcome.search_best})"
        hooks.note(
            f"{name}: re-measure winner: trial {winner.trial}, "
            f"{winner.throughput.describe()} infer/s" + (changed if outcome.changed_winner else "")
        )
    return remeasured


def prepare_model_variants(
    options: TuneOptions,
    model_dir: Path,
    config: mc.ModelConfig,
    path: Path,
    hooks: Hooks,
    precisions_asked: tuple[str, ...] | None = None,
) -> list[PrecisionVariant]:
    """The model's precision variants (`precisions_asked`, default the run's), each verdict
    told to the console."""
    asked = options.precisions if precisions_asked is None else precisions_asked
    if not options.precisions_explicit:
        asked = default_precisions(asked, backend_name(config), Platform.detect())
    precisions = list(dict.fromkeys(("fp32", *asked)))
    hooks.note(f"{model_dir.name}: preparing precisions {', '.join(precisions)}")
    variants = prepare_variants(
        model_dir,
        config,
        path,
        precisions,
        options.max_accuracy_drop,
        options.validation_data,
        options.cache_dir,
        engine_max_batch=batch_cap(options, config, path) if config.max_batch_size > 0 else 0,
    )
    for variant in variants:
        hooks.note(f"{model_dir.name}: {variant.verdict}")
    return variants


def default_precisions(asked: tuple[str, ...], backend: str, platform: Platform) -> tuple[str, ...]:
    """Of the default precisions, those worth preparing for a model of `backend` here: those
    its backend has, and for TorchScript fp16 only where it can run on a GPU (on a CPU it is
    never faster) and bf16 only on a GPU or a CPU with native bf16."""
    offered = [p for p in asked if p in backend_precisions(backend)]
    if backend == "pytorch" and not platform.gpu_for(backend):
        offered = [p for p in offered if p != "fp16" and (p != "bf16" or platform.cpu_bf16)]
    return tuple(offered)


def config_text(model_dir: Path, config: mc.ModelConfig) -> str:
    """config.pbtxt as the user wrote it (the completed config when there is none)."""
    path = model_dir / CONFIG_FILENAME
    return path.read_text(errors="replace") if path.is_file() else config_to_text(config)


def time_left(budget: Duration | None, started: float) -> Duration | None:
    """What is left of `budget` since `started` (at least a millisecond: the search then
    stops before its first trial)."""
    if budget is None:
        return None
    return Duration.from_s(max(budget.s - (time.monotonic() - started), 1e-3))


def remove_tree(path: Path) -> None:
    """Remove a run's scratch folder, errors ignored: it runs in a `finally`, where raising
    would replace the error that ended the run."""
    shutil.rmtree(path, ignore_errors=True)
