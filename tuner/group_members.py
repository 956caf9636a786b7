"""The models of a group tuned together (an ensemble's steps, a traffic mix's models): each
one ready to search, its part of a joint candidate refused when its precision cannot be served,
the run summary of the group, and the best configs written back all or none."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from serve.api import CONFIG_FILENAME, ModelDirectory, open_model_directory
from tuner.candidate import PRECISION, Candidate, apply, diff, step_candidate, variant_filename
from tuner.evaluate import precision_refusal
from tuner.precision import PrecisionVariant
from tuner.precisions import backend_precisions
from tuner.results import run_summary, variant_result
from tuner.run import (
    Hooks,
    TuneError,
    TuneOptions,
    config_text,
    fingerprint_of,
    prepare_model_variants,
)
from tuner.run_schema import ConfigChange, PipelineStep, PlatformInfo, RunSummary, WrittenFiles
from tuner.search_types import SearchResult, TrialOutcome
from tuner.server_control import TuningServer
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


def members_fingerprint(
    options: TuneOptions, own: dict[str, str], steps: Sequence[StepSetup]
) -> dict[str, str]:
    """The group's own fingerprint (`own`: an ensemble's config, a mix's shares and cores) and
    every member's (model file, config, budget...), named after it."""
    fingerprint = dict(own)
    for step in steps:
        mine = fingerprint_of(options, step.base, step.model_path)
        fingerprint |= {f"{step.model}.{key}": value for key, value in mine.items()}
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
