"""Tuning an ensemble as a pipeline: its composing models' configs searched jointly (one study
over `PipelineSpace`), each trial measured through the ensemble so that the latency budget is
end to end, and the best configs written back all or none. The ensemble's own config is never
changed."""

from __future__ import annotations

import hashlib
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from analyzer.api import Measurement
from serve.api import CONFIG_FILENAME, ModelDirectory, ServeError, open_model_directory, read_config
from tuner.budget import LatencyBudget
from tuner.candidate import PRECISION, Candidate, apply, diff, step_candidate, variant_filename
from tuner.defaults import DEFAULT_PIPELINE_TRIALS
from tuner.duration import Duration
from tuner.evaluate import EvaluationSettings, measure_loaded, precision_refusal
from tuner.pipeline_space import PipelineSpace
from tuner.plan import Target
from tuner.precision import PrecisionVariant
from tuner.precisions import backend_precisions
from tuner.remeasure import server_measurer, with_remeasure
from tuner.results import run_summary, variant_result, write_model_report
from tuner.run import (
    Hooks,
    TuneError,
    TuneOptions,
    config_text,
    fingerprint_of,
    model_space,
    prepare_model_variants,
    remeasure_search,
    remove_tree,
    search_settings,
    search_time_left,
)
from tuner.run_schema import ConfigChange, PipelineStep, PlatformInfo, RunSummary, WrittenFiles
from tuner.search import run_search
from tuner.search_types import SearchResult, TrialContext, TrialOutcome
from tuner.server_control import ServerError, TuningServer, tuning_server
from tuner.space import Platform
from tuner.writeback import ModelWrite, WriteBack, copy_model_dir, write_back_all


@dataclass(frozen=True, slots=True)
class StepSetup:
    """One composing model, ready to search: its folder as the server reads it, its usable
    precision variants, its model file."""

    opened: ModelDirectory
    variants: tuple[PrecisionVariant, ...]
    model_path: Path

    @property
    def model(self) -> str:
        return self.opened.name

    @property
    def base(self) -> mc.ModelConfig:
        return self.opened.config

    def variant(self, precision: str) -> PrecisionVariant | None:
        return next((v for v in self.variants if v.precision == precision), None)


class PipelineEvaluator:
    """Callable the search loop uses: a pipeline Candidate -> TrialOutcome. Loads each
    composing model's part of the candidate (only those that changed since the last trial),
    then measures through the ensemble."""

    def __init__(
        self,
        ensemble: mc.ModelConfig,
        steps: Sequence[StepSetup],
        server: TuningServer,
        budget: LatencyBudget,
        settings: EvaluationSettings,
    ) -> None:
        self._ensemble = ensemble
        self._steps = tuple(steps)
        self._server = server
        self._budget = budget
        self._settings = settings
        self._loaded: dict[str, mc.ModelConfig] = {}
        self._ensemble_loaded = False
        self.last_measurement: Measurement | None = None

    def configs_for(self, candidate: Candidate) -> dict[str, mc.ModelConfig]:
        """Each composing model's config under `candidate` (its own config as written where
        the candidate has no part for it)."""
        return {
            step.model: apply(step_candidate(candidate, step.model), step.base)
            for step in self._steps
        }

    def load(self, candidate: Candidate) -> None:
        """Load each composing model whose config under `candidate` differs from what is
        loaded, then the ensemble (once); ServerError naming the model refused."""
        for model, config in self.configs_for(candidate).items():
            if self._loaded.get(model) == config:
                continue
            self._loaded.pop(model, None)
            try:
                self._server.load(config, model)
            except ServerError as exc:
                raise ServerError(f"the server refused {model}'s config: {exc}") from None
            self._loaded[model] = config
        if not self._ensemble_loaded:
            try:
                self._server.load(self._ensemble)
            except ServerError as exc:
                raise ServerError(f"the server refused the ensemble: {exc}") from None
            self._ensemble_loaded = True

    def __call__(self, candidate: Candidate, context: TrialContext | None = None) -> TrialOutcome:
        refused = steps_refusal(candidate, self._steps)
        if refused is not None:
            return refused
        try:
            self.load(candidate)
        except ServerError as exc:
            return TrialOutcome.failed(str(exc))
        outcome, self.last_measurement = measure_loaded(
            self._server, self._budget, self._settings, context
        )
        return outcome


def tune_pipeline(
    options: TuneOptions, target: Target, time_budget: Duration | None, hooks: Hooks
) -> RunSummary:
    """Tune the ensemble `target.name` as a pipeline and (unless dry-run) write its composing
    models' best configs back, all or none. `time_budget` bounds the whole of it."""
    started = time.monotonic()
    name = target.name
    ensemble_dir = options.repository / name
    try:
        ensemble = read_config(ensemble_dir / CONFIG_FILENAME)
    except ServeError as exc:
        raise TuneError(str(exc)) from None
    ensemble.name = ensemble.name or name
    hooks.note(
        f"{name}: a pipeline ({' -> '.join(target.steps)}): its steps' configs are searched "
        f"jointly and measured through '{name}', the budget end to end"
    )
    report_folder = options.report_dir / name
    report_folder.mkdir(parents=True, exist_ok=True)
    platform = Platform.detect()
    steps = [prepare_step(options, model, hooks) for model in target.steps]
    # A step's max_batch_size never goes below the ensemble's: the ensemble accepts batches
    # of that size and hands them to its steps whole.
    step_options = replace(
        options, space=replace(options.space, min_batch_size=ensemble.max_batch_size)
    )
    space = PipelineSpace(
        name,
        tuple(
            model_space(step_options, s.base, s.model_path, platform, usable_precisions(s))
            for s in steps
        ),
    )
    fingerprint = _pipeline_fingerprint(options, ensemble, steps)
    if options.search == "grid":
        space.grid_points()  # PipelineGridError (one line, exit 1) when too large
    settings = search_settings(
        options, name, fingerprint, report_folder, time_budget, DEFAULT_PIPELINE_TRIALS
    )
    work_dir = Path(tempfile.mkdtemp(prefix="autotune-", dir=report_folder))
    try:
        composing = [s.opened.path for s in steps]
        failure_log = report_folder / "server-start.log"
        with tuning_server(ensemble_dir, work_dir, failure_log, composing) as server:
            add_variants(server, steps)
            evaluation = options.evaluation.for_model(ensemble)
            evaluator = PipelineEvaluator(ensemble, steps, server, options.budget, evaluation)
            sizes = " x ".join(f"{s.model_name} {s.size}" for s in space.steps)
            hooks.note(f"{name}: {space.size} candidates in the joint search space ({sizes})")
            settings = replace(
                settings, time_budget=search_time_left(options, time_budget, started)
            )
            result = run_search(space, evaluator, settings, lambda e: hooks.progress(name, e))
            # Through the ensemble, as the trials: the budget is end to end.
            measure = server_measurer(server, evaluation, options.remeasure)
            remeasured = remeasure_search(
                options, name, result, evaluator.load, measure, time_budget, started, hooks
            )
    finally:
        remove_tree(work_dir)
    gpu = any("KIND_GPU" in step.kinds for step in space.steps)
    summary = joint_summary(options, name, platform, result, steps, space.describe(), gpu)
    summary = with_remeasure(summary, remeasured)
    best = summary.best.candidate if summary.best is not None else None
    summary = with_best(options, summary, steps, best, ensemble_dir)
    write_model_report(summary, report_folder)
    return summary


def steps_refusal(candidate: Candidate, steps: Sequence[StepSetup]) -> TrialOutcome | None:
    """The outcome of a joint candidate one of whose models' precision cannot be served
    (named after that model); None when every part can."""
    for step in steps:
        variants = {v.precision: v for v in step.variants}
        refused = precision_refusal(step_candidate(candidate, step.model), step.base, variants)
        if refused is not None:
            return replace(refused, message=f"{step.model}: {refused.message}")
    return None


def joint_summary(
    options: TuneOptions,
    name: str,
    platform: Platform,
    result: SearchResult,
    steps: Sequence[StepSetup],
    space: Sequence[str],
    gpu_searched: bool = False,
) -> RunSummary:
    """The run summary of models tuned in one study (an ensemble's steps, a traffic mix):
    every model's config as written, each variant's verdict named after its model."""
    summary = run_summary(
        model=name,
        budget=options.budget,
        platform=PlatformInfo(platform.cpu_count, gpu_searched, platform.gpu_names),
        search=result,
        variants=(),
        as_written_config="".join(
            f"# {s.model}/{CONFIG_FILENAME}\n{config_text(s.opened.path, s.base)}\n" for s in steps
        ),
        validation_source="",
        space=space,
    )
    return replace(
        summary,
        variants=tuple(
            replace(variant_result(v), verdict=f"{s.model}: {v.verdict}")
            for s in steps
            for v in s.variants
            if s.opened.backend == "onnxruntime"
        ),
    )


def prepare_step(options: TuneOptions, model: str, hooks: Hooks) -> StepSetup:
    """One model tuned with others (an ensemble's step, a traffic mix's model): its config,
    model file and precision variants (TuneError naming the model when it cannot be read)."""
    model_dir = options.repository / model
    try:
        opened = open_model_directory(model_dir)
    except Exception as exc:
        raise TuneError(f"step '{model}': {exc}") from None
    path = opened.model_file()
    if not path.exists():
        raise TuneError(f"step '{model}': model file {path} does not exist")
    # The run's --validation-data holds the ensemble's inputs, not a step's: each step is
    # checked on its own example data (or random inputs).
    asked = tuple(p for p in options.precisions if p in backend_precisions(opened.backend))
    step_options = replace(options, validation_data=None)
    variants = prepare_model_variants(step_options, model_dir, opened.config, path, hooks, asked)
    return StepSetup(opened, tuple(variants), path)


def usable_precisions(step: StepSetup) -> tuple[str, ...]:
    """The precisions the step's space may offer (fp32 at least)."""
    return tuple(v.precision for v in step.variants if v.usable) or ("fp32",)


def add_variants(server: TuningServer, steps: Sequence[StepSetup]) -> None:
    """Make each step's reduced-precision files servable by the tuning server."""
    for step in steps:
        for variant in step.variants:
            if variant.model_path is None or variant.precision == "fp32":
                continue
            filename = variant_filename(step.model_path.name, variant.precision)
            for version in step.opened.versions:
                server.add_variant(version, filename, variant.model_path, step.model)
            for relative, source in variant.model_folder_files().items():
                server.add_file(relative, source, step.model)


def _pipeline_fingerprint(
    options: TuneOptions, ensemble: mc.ModelConfig, steps: Sequence[StepSetup]
) -> dict[str, str]:
    """The ensemble's config and every step's fingerprint (model file, config, budget...)."""
    digest = hashlib.sha256(ensemble.SerializeToString(deterministic=True)).hexdigest()[:16]
    fingerprint = {"ensemble_config": digest}
    for step in steps:
        own = fingerprint_of(options, step.base, step.model_path)
        fingerprint |= {f"{step.model}.{key}": value for key, value in own.items()}
    return fingerprint


def with_best(
    options: TuneOptions,
    summary: RunSummary,
    steps: Sequence[StepSetup],
    best: Candidate | None,
    ensemble_dir: Path | None,
) -> RunSummary:
    """The summary with each step's part of the best, its changes, and (unless dry-run) what
    was written: every changed step's config, all or none (also a traffic mix's models,
    which have no ensemble: `ensemble_dir` None). No best: each step listed, nothing else."""
    if best is None:
        return replace(summary, pipeline=tuple(PipelineStep(s.model) for s in steps))
    tuned = {s.model: apply(step_candidate(best, s.model), s.base) for s in steps}
    changes = {
        s.model: tuple(ConfigChange(*c) for c in diff(s.base, tuned[s.model])) for s in steps
    }
    written: dict[str, WriteBack] = {}
    to_write = [s for s in steps if tuned[s.model] != s.base]
    if options.output_repository is not None:
        to_write = list(steps)
    if not options.dry_run and to_write:
        written = _write(options, steps, to_write, tuned, best, ensemble_dir)
    pipeline = tuple(
        PipelineStep(
            model=s.model,
            best=step_candidate(best, s.model).key,
            changes=changes[s.model],
            written=_written_files(written.get(s.model), s.opened.source),
        )
        for s in steps
    )
    flat = tuple(
        replace(change, field=f"{s.model}: {change.field}")
        for s in steps
        for change in changes[s.model]
    )
    files = list(written.values())
    all_written = None
    if files:
        all_written = WrittenFiles(
            config=", ".join(str(w.config_path) for w in files),
            backup=", ".join(str(w.backup_path) for w in files if w.backup_path),
            model_files=", ".join(str(p) for w in files for p in w.model_files),
            source=", ".join(s.opened.source for s in steps),
        )
    return replace(summary, changes=flat, written=all_written, pipeline=pipeline)


def _write(
    options: TuneOptions,
    steps: Sequence[StepSetup],
    to_write: Sequence[StepSetup],
    tuned: dict[str, mc.ModelConfig],
    best: Candidate,
    ensemble_dir: Path | None,
) -> dict[str, WriteBack]:
    target_dirs = {s.model: s.opened.path for s in steps}
    if options.output_repository is not None:
        # The output repository serves on its own: the ensemble and every step are copied.
        if ensemble_dir is not None:
            copy_model_dir(ensemble_dir, options.output_repository)
        target_dirs = {
            s.model: copy_model_dir(s.opened.path, options.output_repository) for s in steps
        }
    writes = []
    for step in to_write:
        precision = str(step_candidate(best, step.model).get(PRECISION, "fp32"))
        variant = step.variant(precision) if precision != "fp32" else None
        variant_file = variant.model_path if variant is not None else None
        writes.append(
            ModelWrite(
                target_dirs[step.model],
                tuned[step.model],
                step.opened.versions,
                variant_file,
                variant.model_folder_files() if variant is not None else {},
            )
        )
    done = write_back_all(writes)
    return {step.model: w for step, w in zip(to_write, done, strict=True)}


def _written_files(written: WriteBack | None, source: str) -> WrittenFiles | None:
    if written is None:
        return None
    return WrittenFiles(
        config=str(written.config_path),
        backup=str(written.backup_path or ""),
        model_files=", ".join(str(p) for p in written.model_files),
        source=source,
    )
