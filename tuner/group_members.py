"""The models of a group tuned together (a model alone, an ensemble's steps, a traffic mix's
models): each one ready to search, its part of a group's candidate refused when its precision
cannot be served, the run summary of the group, and the best configs written back all or none.

A model tuned alone is a group of one whose candidates, changes and verdicts name no model
(`alone`); in a group of several every parameter is named after its model."""

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
from tuner.writeback import ModelWrite, WriteBack, copy_model_dir, write_back_all


@dataclass(frozen=True, slots=True)
class Member:
    """One model of a group, ready to search: its folder as the server reads it, its
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


def member_part(candidate: Candidate, model: str, alone: bool) -> Candidate:
    """`model`'s part of a group's candidate (a model tuned alone: all of it)."""
    return candidate if alone else step_candidate(candidate, model)


def members_refusal(
    candidate: Candidate, members: Sequence[Member], alone: bool = False
) -> TrialOutcome | None:
    """The outcome of a candidate one of whose models' precision cannot be served (named
    after that model unless it is tuned alone); None when every part can."""
    for member in members:
        variants = {v.precision: v for v in member.variants}
        part = member_part(candidate, member.model, alone)
        refused = precision_refusal(part, member.base, variants)
        if refused is not None:
            return (
                refused if alone else replace(refused, message=f"{member.model}: {refused.message}")
            )
    return None


def group_summary(
    options: TuneOptions,
    name: str,
    platform: PlatformInfo,
    result: SearchResult,
    members: Sequence[Member],
    space: Sequence[str],
    alone: bool = False,
) -> RunSummary:
    """The run summary of a group's study: every model's config as written (headed by its
    name in a group of several) and each variant's verdict (named after its model there)."""
    if alone:
        (member,) = members
        return run_summary(
            model=name,
            budget=options.budget,
            platform=platform,
            search=result,
            variants=member.variants,
            as_written_config=config_text(member.opened.path, member.base),
            validation_source=next((v.accuracy.source for v in member.variants if v.accuracy), ""),
            space=space,
        )
    summary = run_summary(
        model=name,
        budget=options.budget,
        platform=platform,
        search=result,
        variants=(),
        as_written_config="".join(
            f"# {m.model}/{CONFIG_FILENAME}\n{config_text(m.opened.path, m.base)}\n"
            for m in members
        ),
        validation_source="",
        space=space,
    )
    return replace(
        summary,
        variants=tuple(
            replace(variant_result(v), verdict=f"{m.model}: {v.verdict}")
            for m in members
            for v in m.variants
            if m.opened.backend == "onnxruntime"
        ),
    )


def prepare_member(options: TuneOptions, model: str, hooks: Hooks, alone: bool = False) -> Member:
    """One model of a group: its config, model file and precision variants (TuneError naming
    the model when it cannot be read). A model tuned alone is checked on the run's
    --validation-data; in a group (an ensemble's steps) that data is the group's, not a
    model's, so each is checked on its own example data (or random inputs)."""
    model_dir = options.repository / model
    where = "" if alone else f"step '{model}': "
    try:
        opened = open_model_directory(model_dir)
    except Exception as exc:
        raise TuneError(f"{where}{exc}") from None
    path = opened.model_file()
    if not path.exists():
        raise TuneError(f"{where}model file {path} does not exist")
    if alone:
        variants = prepare_model_variants(options, model_dir, opened.config, path, hooks)
    else:
        asked = tuple(p for p in options.precisions if p in backend_precisions(opened.backend))
        own_data = replace(options, validation_data=None)
        variants = prepare_model_variants(own_data, model_dir, opened.config, path, hooks, asked)
    return Member(opened, tuple(variants), path)


def usable_precisions(member: Member) -> tuple[str, ...]:
    """The precisions the member's space may offer (fp32 at least)."""
    return tuple(v.precision for v in member.variants if v.usable) or ("fp32",)


def add_variants(server: TuningServer, members: Sequence[Member]) -> None:
    """Make each member's reduced-precision files servable by the tuning server."""
    for member in members:
        for variant in member.variants:
            if variant.model_path is None or variant.precision == "fp32":
                continue
            filename = variant_filename(member.model_path.name, variant.precision)
            for version in member.opened.versions:
                server.add_variant(version, filename, variant.model_path, member.model)
            for relative, source in variant.model_folder_files().items():
                server.add_file(relative, source, member.model)


def members_fingerprint(
    options: TuneOptions, own: dict[str, str], members: Sequence[Member], alone: bool = False
) -> dict[str, str]:
    """The group's own fingerprint (`own`: an ensemble's config, a mix's shares and cores) and
    every member's (model file, config, budget...), named after it unless it is tuned alone
    (a model's studies keep the names they had before groups)."""
    fingerprint = dict(own)
    for member in members:
        mine = fingerprint_of(options, member.base, member.model_path)
        fingerprint |= mine if alone else {f"{member.model}.{k}": v for k, v in mine.items()}
    return fingerprint


def with_best(
    options: TuneOptions,
    summary: RunSummary,
    members: Sequence[Member],
    best: Candidate | None,
    front: Path | None,
    alone: bool = False,
) -> RunSummary:
    """The summary with each member's part of the best, its changes, and (unless dry-run)
    what was written: every changed member's config, all or none (`front`: the ensemble's
    folder, copied with them into an output repository). A config as written that wins is
    left untouched. No best: each member of a group listed, nothing else."""
    if best is None:
        if alone:
            return summary
        return replace(summary, pipeline=tuple(PipelineStep(m.model) for m in members))
    parts = {m.model: member_part(best, m.model, alone) for m in members}
    tuned = {m.model: apply(parts[m.model], m.base) for m in members}
    changes = {
        m.model: tuple(ConfigChange(*c) for c in diff(m.base, tuned[m.model])) for m in members
    }
    written: dict[str, WriteBack] = {}
    to_write = [m for m in members if tuned[m.model] != m.base]
    if options.output_repository is not None:
        to_write = list(members)
    if not options.dry_run and to_write:
        written = _write(options, members, to_write, tuned, parts, front)
    if alone:
        (member,) = members
        files = _written_files(written.get(member.model), member.opened.source)
        return replace(summary, changes=changes[member.model], written=files)
    pipeline = tuple(
        PipelineStep(
            model=m.model,
            best=parts[m.model].key,
            changes=changes[m.model],
            written=_written_files(written.get(m.model), m.opened.source),
        )
        for m in members
    )
    flat = tuple(
        replace(change, field=f"{m.model}: {change.field}")
        for m in members
        for change in changes[m.model]
    )
    all_written = None
    if written:
        done = list(written.values())
        all_written = WrittenFiles(
            config=", ".join(str(w.config_path) for w in done),
            backup=", ".join(str(w.backup_path) for w in done if w.backup_path),
            model_files=", ".join(str(p) for w in done for p in w.model_files),
            source=", ".join(m.opened.source for m in members),
        )
    return replace(summary, changes=flat, written=all_written, pipeline=pipeline)


def _write(
    options: TuneOptions,
    members: Sequence[Member],
    to_write: Sequence[Member],
    tuned: dict[str, mc.ModelConfig],
    parts: dict[str, Candidate],
    front: Path | None,
) -> dict[str, WriteBack]:
    target_dirs = {m.model: m.opened.path for m in members}
    if options.output_repository is not None:
        # The output repository serves on its own: the ensemble and every member are copied.
        if front is not None:
            copy_model_dir(front, options.output_repository)
        target_dirs = {
            m.model: copy_model_dir(m.opened.path, options.output_repository) for m in members
        }
    writes = []
    for member in to_write:
        precision = str(parts[member.model].get(PRECISION, "fp32"))
        variant = member.variant(precision) if precision != "fp32" else None
        writes.append(
            ModelWrite(
                target_dirs[member.model],
                tuned[member.model],
                member.opened.versions,
                variant.model_path if variant is not None else None,
                variant.model_folder_files() if variant is not None else {},
            )
        )
    done = write_back_all(writes)
    return {member.model: w for member, w in zip(to_write, done, strict=True)}


def _written_files(written: WriteBack | None, source: str) -> WrittenFiles | None:
    if written is None:
        return None
    return WrittenFiles(
        config=str(written.config_path),
        backup=str(written.backup_path or ""),
        model_files=", ".join(str(p) for p in written.model_files),
        source=source,
    )
